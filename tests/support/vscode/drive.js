'use strict';
// node drive.js EXTENSION_DIR: llmgw for VS Code, as unpacked from the .vsix a gateway served, through what a
// person does with it in one VS Code window, against that gateway.
//
// It runs llmgw: Sign In and prints the page it opened as a line of JSON ({"opened": URL}); the test signs in
// there in a browser, makes a key, and writes the page's "Open in VS Code" link back as a line on stdin. Then
// it chats, and prints what it saw as one more line of JSON. Given in the environment: LLMGW_MODEL, the model
// to chat with; LLMGW_WORKSPACE_GATEWAY, a gateway a workspace's settings name (which must be ignored). The
// extension's own package.json gives llmgw.gatewayUrl's default, as VS Code reads it.

const fs = require('fs');
const Module = require('module');
const path = require('path');
const { makeContext, makeHost } = require('./host');

const folder = path.resolve(process.argv[2]);
const contributed = JSON.parse(fs.readFileSync(path.join(folder, 'package.json'), 'utf8'))
  .contributes.configuration.properties;
const settings = {};
for (const [name, spec] of Object.entries(contributed)) {
  settings[name] = { default: spec.default };
}
settings['llmgw.gatewayUrl'].workspace = process.env.LLMGW_WORKSPACE_GATEWAY;
const host = makeHost(settings);
const resolve = Module._resolveFilename;
Module._resolveFilename = function resolveVscode(request, ...rest) {
  return request === 'vscode' ? 'vscode' : resolve.call(this, request, ...rest);
};
require.cache.vscode = { id: 'vscode', filename: 'vscode', loaded: true, exports: host.vscode };
const vscode = host.vscode;

async function turn(provider, model, messages, options) {
  const parts = [];
  const source = new vscode.CancellationTokenSource();
  await provider.provideLanguageModelChatResponse(model, messages, options, { report: (p) => parts.push(p) },
    source.token);
  return parts.map((p) => (p instanceof vscode.LanguageModelToolCallPart
    ? { call: p.name, id: p.callId, input: p.input } : { text: p.value }));
}

async function main() {
  const seen = {};
  const context = makeContext();
  const extension = require(path.join(folder, 'extension.js'));
  extension.activate(context);
  const provider = host.providers.get('llmgw');
  const silent = { silent: true };
  const token = new vscode.CancellationTokenSource().token;

  seen.commands = [...host.commands.keys()].sort();
  seen.modelsBeforeSignIn = await provider.provideLanguageModelChatInformation(silent, token);

  // llmgw: Sign In opens the Connect page; the page's link comes back with the state it carried.
  await vscode.commands.executeCommand('llmgw.signIn');
  seen.opened = host.opened.slice();
  process.stdout.write(`${JSON.stringify({ opened: host.opened[0] })}\n`);
  const link = await lineFromStdin();
  const gateway = settings['llmgw.gatewayUrl'].default;
  await host.uriHandlers[0].handleUri(vscode.Uri.parse(link));
  seen.afterLink = host.shown.splice(0);
  seen.keptFor = [...context.secrets.all.keys()];

  const models = await provider.provideLanguageModelChatInformation(silent, token);
  seen.models = models;
  const model = models.find((m) => m.id === process.env.LLMGW_MODEL);

  // A turn with a tool: the model calls it; its result goes back, and the model answers in words.
  const tools = [{ name: 'get_weather', description: 'The weather in a city now.',
    inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const ask = { role: vscode.LanguageModelChatMessageRole.User, name: undefined,
    content: [new vscode.LanguageModelTextPart('What is the weather? Use get_weather.')] };
  const options = { tools, toolMode: vscode.LanguageModelChatToolMode.Auto };
  seen.firstTurn = await turn(provider, model, [ask], options);
  const call = seen.firstTurn.find((p) => p.call);
  const messages = [ask,
    { role: vscode.LanguageModelChatMessageRole.Assistant, name: undefined,
      content: [new vscode.LanguageModelToolCallPart(call.id, call.call, call.input)] },
    { role: vscode.LanguageModelChatMessageRole.User, name: undefined,
      content: [new vscode.LanguageModelToolResultPart(call.id, [new vscode.LanguageModelTextPart('Sunny, 21 C')])] }];
  seen.secondTurn = await turn(provider, model, messages, options);
  seen.tokens = await provider.provideTokenCount(model, 'twelve chars', token);

  // A link this window did not ask for: confirmed first; declined, nothing changes.
  host.answers.push(undefined);
  const strange = `vscode://llmgw.llmgw/signin?${new URLSearchParams({ gateway: 'http://203.0.113.9:8080',
    key: 'sk-llmgw-not-ours' })}`;
  await host.uriHandlers[0].handleUri(vscode.Uri.parse(strange));
  seen.strangeLink = host.shown.splice(0);
  seen.gatewayAfterStrangeLink = settings['llmgw.gatewayUrl'].global || settings['llmgw.gatewayUrl'].default;
  seen.keptAfterStrangeLink = [...context.secrets.all.keys()];

  // A wrong key: the gateway's refusal, in its own words.
  await context.secrets.store(`llmgw.apiKey:${gateway}`, 'sk-llmgw-revoked');
  try {
    await turn(provider, model, [ask], {});
    seen.refused = null;
  } catch (error) {
    seen.refused = error.message;
  }
  process.stdout.write(`${JSON.stringify(seen)}\n`);
}

function lineFromStdin() {
  return new Promise((resolve, reject) => {
    let buffered = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (chunk) => {
      buffered += chunk;
      if (buffered.includes('\n')) {
        process.stdin.pause();
        resolve(buffered.split('\n')[0].trim());
      }
    });
    process.stdin.on('end', () => reject(new Error('stdin ended before the link came')));
  });
}

main().catch((error) => {
  process.stderr.write(`${error.stack}\n`);
  process.exit(1);
});
