'use strict';
// llmgw for VS Code: the chat models of one llmgw gateway, offered to VS Code's language-model API (the chat's
// model picker, agent mode, and any extension that asks vscode.lm for a model).
//
// Plain JavaScript with no dependencies and no build step: the gateway serves this file inside the .vsix it
// makes (llmgw/portal/vsix.py), with its own address as llmgw.gatewayUrl's default, so a site with no
// internet and no marketplace can install it. Node's http and https do the requests; answers stream as the
// gateway's server-sent events arrive.

const vscode = require('vscode');
const crypto = require('crypto');
const http = require('http');
const https = require('https');
const { StringDecoder } = require('string_decoder');

const VENDOR = 'llmgw';
const SECTION = 'llmgw';
// A sign-in begun here is good for this long: the person signs in to the portal and makes a key meanwhile.
const SIGN_IN_FOR_MS = 15 * 60 * 1000;
const PENDING = 'llmgw.pendingSignIn';
// Where the catalog gives no sizes: a context most served models have, a quarter of it for the answer.
const DEFAULT_CONTEXT = 8192;
// The tokens a request may hold are counted as a tokenizer would roughly: four characters each.
const CHARS_PER_TOKEN = 4;

/** The gateway's address from the person's own settings only: a workspace (a cloned repository) must not
 * choose where code is sent, so its value is never read, whatever the setting's scope says. */
function gatewayUrl() {
  const seen = vscode.workspace.getConfiguration(SECTION).inspect('gatewayUrl') || {};
  const value = seen.globalValue !== undefined ? seen.globalValue : seen.defaultValue;
  return normalise(String(value || ''));
}

/** scheme://host[:port] with no trailing slash and no /v1, or '' when `text` is not an http(s) address. */
function normalise(text) {
  let url;
  try {
    url = new URL(text.trim());
  } catch (e) {
    return '';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return '';
  }
  if (url.username || url.password || url.search || url.hash) {
    return '';
  }
  const path = url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
  return `${url.protocol}//${url.host}${path}`;
}

function secretName(gateway) {
  return `llmgw.apiKey:${gateway}`;
}

/** One request to the gateway: resolves to {status, headers, body} where body is the response stream. */
function send(method, url, key, payload, token) {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const client = target.protocol === 'https:' ? https : http;
    const data = payload === undefined ? undefined : Buffer.from(JSON.stringify(payload));
    const headers = { Accept: payload && payload.stream ? 'text/event-stream' : 'application/json' };
    if (key) {
      headers.Authorization = `Bearer ${key}`;
    }
    if (data) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = data.length;
    }
    const request = client.request(target, { method, headers }, (response) => {
      resolve({ status: response.statusCode || 0, headers: response.headers, body: response });
    });
    request.on('error', (error) => reject(new Error(`llmgw: ${url} could not be reached (${error.message})`)));
    if (token) {
      token.onCancellationRequested(() => request.destroy(new Error('cancelled')));
    }
    request.end(data);
  });
}

async function readAll(stream) {
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The gateway's own sentence for a refusal, else the status. */
async function refusal(response) {
  const text = await readAll(response.body);
  let said = '';
  try {
    const doc = JSON.parse(text);
    said = (doc.error && doc.error.message) || '';
  } catch (e) {
    said = text.slice(0, 300);
  }
  let sentence = `llmgw answered ${response.status}${said ? `: ${said}` : ''}`;
  if (response.status === 401) {
    sentence += ' (run "llmgw: Sign In" for a new key)';
  }
  return new Error(sentence);
}

/** A catalog entry of /v1/models as VS Code's LanguageModelChatInformation. */
function information(model, gateway) {
  const can = Array.isArray(model.capabilities) ? model.capabilities : [];
  const context = Number(model.context_length) > 0 ? Number(model.context_length) : DEFAULT_CONTEXT;
  const output = Number(model.max_output_tokens) > 0
    ? Math.min(Number(model.max_output_tokens), context - 1) : Math.floor(context / 4);
  return {
    id: model.id,
    name: model.id,
    family: model.id,
    version: String(model.owned_by || VENDOR),
    detail: 'llmgw',
    tooltip: `${model.id} on ${gateway}`,
    maxInputTokens: context - output,
    maxOutputTokens: output,
    capabilities: { toolCalling: can.includes('tools'), imageInput: can.includes('vision') },
  };
}

function isText(part) {
  return part instanceof vscode.LanguageModelTextPart || (part && typeof part.value === 'string');
}

function isToolCall(part) {
  return part instanceof vscode.LanguageModelToolCallPart
    || (part && typeof part.callId === 'string' && typeof part.name === 'string' && 'input' in part);
}

function isToolResult(part) {
  return part instanceof vscode.LanguageModelToolResultPart
    || (part && typeof part.callId === 'string' && Array.isArray(part.content));
}

function isData(part) {
  return part && typeof part.mimeType === 'string' && part.data instanceof Uint8Array;
}

/** A tool result's parts as the text an OpenAI `tool` message carries. */
function resultText(part) {
  return part.content.map((inner) => {
    if (isText(inner)) {
      return inner.value;
    }
    if (isData(inner) && /^(text\/|application\/json)/.test(inner.mimeType)) {
      return Buffer.from(inner.data).toString('utf8');
    }
    return JSON.stringify(inner);
  }).join('');
}

/** VS Code's request messages as OpenAI's chat messages: tool calls on the assistant's turn, each result a
 * `tool` message of its own before the rest of the user's turn, pictures as data: URLs. */
function toOpenAI(messages) {
  const out = [];
  for (const message of messages) {
    const role = message.role === vscode.LanguageModelChatMessageRole.Assistant ? 'assistant'
      : message.role === vscode.LanguageModelChatMessageRole.User ? 'user' : 'system';
    const content = [];
    const calls = [];
    for (const part of message.content) {
      if (isToolResult(part)) {
        out.push({ role: 'tool', tool_call_id: part.callId, content: resultText(part) });
      } else if (isToolCall(part)) {
        calls.push({ id: part.callId, type: 'function',
          function: { name: part.name, arguments: JSON.stringify(part.input === undefined ? {} : part.input) } });
      } else if (isText(part)) {
        content.push({ type: 'text', text: part.value });
      } else if (isData(part) && part.mimeType.startsWith('image/')) {
        const url = `data:${part.mimeType};base64,${Buffer.from(part.data).toString('base64')}`;
        content.push({ type: 'image_url', image_url: { url } });
      }
    }
    if (!content.length && !calls.length) {
      continue;
    }
    const onlyText = content.every((c) => c.type === 'text');
    const entry = { role, content: onlyText ? content.map((c) => c.text).join('') : content };
    if (calls.length) {
      entry.tool_calls = calls;
      if (!content.length) {
        entry.content = null;
      }
    }
    out.push(entry);
  }
  return out;
}

/** The tools VS Code offers the model, in OpenAI's shape. */
function toolsOf(options) {
  return (options.tools || []).map((tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description || '',
      parameters: tool.inputSchema || { type: 'object', properties: {} } },
  }));
}

/** Server-sent events' data lines from a stream, as they arrive. */
async function* events(stream) {
  // A character of several bytes may be cut between two chunks: the decoder keeps its first bytes for the next.
  const decoder = new StringDecoder('utf8');
  let buffered = '';
  for await (const chunk of stream) {
    buffered += decoder.write(chunk);
    let end;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, end).replace(/\r$/, '');
      buffered = buffered.slice(end + 1);
      if (line.startsWith('data:')) {
        yield line.slice(5).trim();
      }
    }
  }
}

class GatewayModels {
  constructor(context) {
    this.context = context;
    this.changed = new vscode.EventEmitter();
    this.onDidChangeLanguageModelChatInformation = this.changed.event;
  }

  async key(gateway) {
    return gateway ? this.context.secrets.get(secretName(gateway)) : undefined;
  }

  async provideLanguageModelChatInformation(options, token) {
    const gateway = gatewayUrl();
    const key = await this.key(gateway);
    if (!gateway || !key) {
      if (!options.silent) {
        const choice = await vscode.window.showInformationMessage(
          gateway ? `Sign in to llmgw at ${gateway} to use its models.` : 'Set llmgw.gatewayUrl to your gateway.',
          'Sign In', 'Enter API Key');
        if (choice === 'Sign In') {
          await vscode.commands.executeCommand('llmgw.signIn');
        } else if (choice === 'Enter API Key') {
          await vscode.commands.executeCommand('llmgw.enterApiKey');
        }
      }
      return [];
    }
    const response = await send('GET', `${gateway}/v1/models`, key, undefined, token);
    if (response.status !== 200) {
      const error = await refusal(response);
      if (!options.silent) {
        vscode.window.showWarningMessage(error.message);
      }
      return [];
    }
    const listed = JSON.parse(await readAll(response.body));
    return (listed.data || [])
      .filter((model) => !Array.isArray(model.capabilities) || model.capabilities.includes('chat'))
      .map((model) => information(model, gateway));
  }

  async provideLanguageModelChatResponse(model, messages, options, progress, token) {
    const gateway = gatewayUrl();
    const key = await this.key(gateway);
    if (!key) {
      throw new Error('llmgw: not signed in; run "llmgw: Sign In"');
    }
    const body = { model: model.id, messages: toOpenAI(messages), stream: true,
      stream_options: { include_usage: true } };
    const tools = toolsOf(options);
    if (tools.length) {
      body.tools = tools;
      body.tool_choice = options.toolMode === vscode.LanguageModelChatToolMode.Required ? 'required' : 'auto';
    }
    for (const name of ['temperature', 'top_p', 'max_tokens', 'stop', 'seed']) {
      if (options.modelOptions && options.modelOptions[name] !== undefined) {
        body[name] = options.modelOptions[name];
      }
    }
    const response = await send('POST', `${gateway}/v1/chat/completions`, key, body, token);
    if (response.status !== 200) {
      throw await refusal(response);
    }
    // A tool call arrives in pieces (its id and name first, then its arguments); it is reported whole.
    const calls = new Map();
    for await (const data of events(response.body)) {
      if (token.isCancellationRequested) {
        response.body.destroy();
        return;
      }
      if (data === '[DONE]') {
        break;
      }
      const chunk = JSON.parse(data);
      if (chunk.error) {
        throw new Error(`llmgw: ${chunk.error.message || 'the answer broke off'}`);
      }
      for (const choice of chunk.choices || []) {
        const delta = choice.delta || {};
        if (delta.content) {
          progress.report(new vscode.LanguageModelTextPart(delta.content));
        }
        for (const piece of delta.tool_calls || []) {
          const call = calls.get(piece.index) || { id: '', name: '', args: '' };
          call.id = piece.id || call.id;
          call.name = (piece.function && piece.function.name) || call.name;
          call.args += (piece.function && piece.function.arguments) || '';
          calls.set(piece.index, call);
        }
      }
    }
    for (const call of calls.values()) {
      let input;
      try {
        input = call.args ? JSON.parse(call.args) : {};
      } catch (e) {
        throw new Error(`llmgw: ${model.id} called ${call.name} with arguments that are not JSON: ${call.args}`);
      }
      progress.report(new vscode.LanguageModelToolCallPart(call.id, call.name, input));
    }
  }

  async provideTokenCount(model, text) {
    if (typeof text === 'string') {
      return Math.ceil(text.length / CHARS_PER_TOKEN);
    }
    const chars = toOpenAI([text]).reduce((sum, m) => sum + JSON.stringify(m.content || '').length, 0);
    return Math.ceil(chars / CHARS_PER_TOKEN);
  }
}

/** llmgw: Sign In: the portal's Connect page with VS Code chosen and a state of this window's own, which the
 * page's "Open in VS Code" link brings back with a new key. */
async function signIn(context) {
  const gateway = gatewayUrl();
  if (!gateway) {
    vscode.window.showErrorMessage('llmgw: set llmgw.gatewayUrl to your gateway (such as https://llm.example.com).');
    return;
  }
  const state = crypto.randomBytes(16).toString('hex');
  await context.globalState.update(PENDING, { state, gateway, until: Date.now() + SIGN_IN_FOR_MS });
  const page = `${gateway}/connect?tool=vscode&state=${state}`;
  await vscode.env.openExternal(vscode.Uri.parse(page, true));
}

async function enterApiKey(context, models) {
  const gateway = gatewayUrl();
  if (!gateway) {
    vscode.window.showErrorMessage('llmgw: set llmgw.gatewayUrl to your gateway first.');
    return;
  }
  const key = await vscode.window.showInputBox({ prompt: `An API key of llmgw at ${gateway}`, password: true,
    ignoreFocusOut: true, placeHolder: 'sk-llmgw-…' });
  if (key && key.trim()) {
    await context.secrets.store(secretName(gateway), key.trim());
    models.changed.fire();
    vscode.window.showInformationMessage(`llmgw: the key is kept for ${gateway}.`);
  }
}

async function signOut(context, models) {
  const gateway = gatewayUrl();
  await context.secrets.delete(secretName(gateway));
  models.changed.fire();
  vscode.window.showInformationMessage(`llmgw: signed out of ${gateway}.`);
}

/** vscode://llmgw.llmgw/signin?gateway=…&key=…&state=…, from the portal's "Open in VS Code". A link this
 * window did not ask for (no state, another state, or another gateway than the one asked) decides where code
 * is sent, so it is confirmed first with the gateway's address shown. */
async function handleUri(context, models, uri) {
  if (uri.path !== '/signin') {
    vscode.window.showWarningMessage(`llmgw: ${uri.path} is not a link llmgw for VS Code takes.`);
    return;
  }
  const query = new URLSearchParams(uri.query);
  const gateway = normalise(query.get('gateway') || '');
  const key = (query.get('key') || '').trim();
  if (!gateway || !key) {
    vscode.window.showErrorMessage('llmgw: the link has no gateway address or no key; make the key again.');
    return;
  }
  const pending = context.globalState.get(PENDING);
  const asked = pending && pending.state === query.get('state') && Date.now() < pending.until
    && pending.gateway === gateway;
  const current = gatewayUrl();
  if (!asked) {
    let sentence = `A link asks VS Code to send your code and questions to the llmgw gateway at ${gateway}.`;
    if (current && current !== gateway) {
      sentence += ` It is set to ${current} now.`;
    }
    if (current.startsWith('https:') && gateway.startsWith('http:')) {
      sentence += ' The link\'s address is plain http, without TLS.';
    }
    const choice = await vscode.window.showWarningMessage(sentence, { modal: true }, 'Use This Gateway');
    if (choice !== 'Use This Gateway') {
      return;
    }
  }
  if (gateway !== current) {
    await vscode.workspace.getConfiguration(SECTION).update('gatewayUrl', gateway,
      vscode.ConfigurationTarget.Global);
  }
  await context.secrets.store(secretName(gateway), key);
  await context.globalState.update(PENDING, undefined);
  models.changed.fire();
  vscode.window.showInformationMessage(`llmgw: signed in to ${gateway}; its models are in the chat's model picker.`);
}

function activate(context) {
  const models = new GatewayModels(context);
  context.subscriptions.push(
    vscode.lm.registerLanguageModelChatProvider(VENDOR, models),
    vscode.commands.registerCommand('llmgw.signIn', () => signIn(context)),
    vscode.commands.registerCommand('llmgw.enterApiKey', () => enterApiKey(context, models)),
    vscode.commands.registerCommand('llmgw.signOut', () => signOut(context, models)),
    vscode.window.registerUriHandler({ handleUri: (uri) => handleUri(context, models, uri) }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration(`${SECTION}.gatewayUrl`)) {
        models.changed.fire();
      }
    }),
    context.secrets.onDidChange(() => models.changed.fire()),
  );
  return { models, handleUri: (uri) => handleUri(context, models, uri) };
}

function deactivate() {}

module.exports = { activate, deactivate, normalise, toOpenAI };
