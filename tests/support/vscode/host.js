'use strict';
// The part of VS Code's extension API that llmgw for VS Code uses, for running the extension's module under
// node against a real gateway (tests/integration/test_vscode_extension.py). It follows @types/vscode 1.105's
// declarations for these members; where VS Code does something a test must see (a URI's query arrives
// percent-decoded, a machine setting is read from the user's settings), it does the same.
//
// What a person would do in VS Code's windows is given as `answers`: each showXMessage or showInputBox takes
// the next answer in line, and every one is recorded in `shown`.

class EventEmitter {
  constructor() {
    this.listeners = [];
    this.event = (listener) => {
      this.listeners.push(listener);
      return { dispose: () => { this.listeners = this.listeners.filter((l) => l !== listener); } };
    };
  }

  fire(value) {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }

  dispose() {
    this.listeners = [];
  }
}

class LanguageModelTextPart {
  constructor(value) {
    this.value = value;
  }
}

class LanguageModelToolCallPart {
  constructor(callId, name, input) {
    this.callId = callId;
    this.name = name;
    this.input = input;
  }
}

class LanguageModelToolResultPart {
  constructor(callId, content) {
    this.callId = callId;
    this.content = content;
  }
}

class LanguageModelDataPart {
  constructor(data, mimeType) {
    this.data = data;
    this.mimeType = mimeType;
  }

  static image(data, mimeType) {
    return new LanguageModelDataPart(data, mimeType);
  }
}

class Uri {
  static parse(text) {
    const url = new URL(text);
    const uri = new Uri();
    uri.scheme = url.protocol.slice(0, -1);
    uri.authority = url.host;
    // VS Code's URI keeps each component percent-decoded.
    uri.path = decodeURIComponent(url.pathname);
    uri.query = decodeURIComponent(url.search.slice(1));
    uri.fragment = decodeURIComponent(url.hash.slice(1));
    uri.text = text;
    return uri;
  }

  toString() {
    return this.text;
  }
}

class CancellationTokenSource {
  constructor() {
    const cancelled = new EventEmitter();
    this.token = { isCancellationRequested: false, onCancellationRequested: cancelled.event };
    this.cancelled = cancelled;
  }

  cancel() {
    this.token.isCancellationRequested = true;
    this.cancelled.fire();
  }
}

/** The `vscode` module for one window: `settings` as {key: {default, global, workspace}}. */
function makeHost(settings) {
  const shown = [];
  const answers = [];
  const opened = [];
  const commands = new Map();
  const providers = new Map();
  const uriHandlers = [];
  const configurationChanged = new EventEmitter();

  function answer(kind, message, rest) {
    const options = rest.length && typeof rest[0] === 'object' && rest[0] !== null ? rest[0] : {};
    const items = rest.filter((item) => typeof item === 'string');
    const given = answers.length ? answers.shift() : undefined;
    shown.push({ kind, message, modal: Boolean(options.modal), items, answered: given });
    return Promise.resolve(given);
  }

  const vscode = {
    EventEmitter,
    LanguageModelTextPart,
    LanguageModelToolCallPart,
    LanguageModelToolResultPart,
    LanguageModelDataPart,
    CancellationTokenSource,
    Uri,
    LanguageModelChatMessageRole: { User: 1, Assistant: 2 },
    LanguageModelChatToolMode: { Auto: 1, Required: 2 },
    ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
    lm: {
      registerLanguageModelChatProvider(vendor, provider) {
        providers.set(vendor, provider);
        return { dispose: () => providers.delete(vendor) };
      },
    },
    commands: {
      registerCommand(id, run) {
        commands.set(id, run);
        return { dispose: () => commands.delete(id) };
      },
      executeCommand(id, ...args) {
        const run = commands.get(id);
        if (!run) {
          return Promise.reject(new Error(`command '${id}' not found`));
        }
        return Promise.resolve(run(...args));
      },
    },
    window: {
      showInformationMessage: (message, ...rest) => answer('information', message, rest),
      showWarningMessage: (message, ...rest) => answer('warning', message, rest),
      showErrorMessage: (message, ...rest) => answer('error', message, rest),
      showInputBox: (options) => answer('input', options.prompt, [{ password: options.password }]),
      registerUriHandler(handler) {
        uriHandlers.push(handler);
        return { dispose: () => {} };
      },
    },
    env: {
      openExternal(uri) {
        opened.push(uri.toString());
        return Promise.resolve(true);
      },
    },
    workspace: {
      getConfiguration(section) {
        const full = (key) => `${section}.${key}`;
        return {
          get(key) {
            const s = settings[full(key)] || {};
            return [s.workspace, s.global, s.default].find((v) => v !== undefined);
          },
          inspect(key) {
            const s = settings[full(key)] || {};
            return { key: full(key), defaultValue: s.default, globalValue: s.global, workspaceValue: s.workspace };
          },
          update(key, value, target) {
            const s = settings[full(key)] || (settings[full(key)] = {});
            s[target === 1 ? 'global' : 'workspace'] = value;
            configurationChanged.fire({ affectsConfiguration: (name) => name === full(key) });
            return Promise.resolve();
          },
        };
      },
      onDidChangeConfiguration: configurationChanged.event,
    },
  };
  return { vscode, shown, answers, opened, commands, providers, uriHandlers, settings };
}

/** An ExtensionContext's secrets, global state and subscriptions, kept in memory for one run. */
function makeContext() {
  const secrets = new Map();
  const state = new Map();
  const secretChanged = new EventEmitter();
  return {
    subscriptions: [],
    secrets: {
      get: (key) => Promise.resolve(secrets.get(key)),
      store: (key, value) => { secrets.set(key, value); secretChanged.fire({ key }); return Promise.resolve(); },
      delete: (key) => { secrets.delete(key); secretChanged.fire({ key }); return Promise.resolve(); },
      onDidChange: secretChanged.event,
      all: secrets,
    },
    globalState: {
      get: (key) => state.get(key),
      update: (key, value) => { state.set(key, value); return Promise.resolve(); },
    },
  };
}

module.exports = { makeHost, makeContext };
