'use strict';
// In a real VS Code: llmgw's models through vscode.lm, as another extension gets them, and a chat with a tool call
// and its result. Each step is a line of JSON in $LLMGW_PROBE_OUT (tests/integration/test_vscode_real.py).
const vscode = require('vscode');
const fs = require('fs');

const out = process.env.LLMGW_PROBE_OUT;
const log = (step) => fs.appendFileSync(out, `${JSON.stringify(step)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function parts(response) {
  const seen = [];
  for await (const part of response.stream) {
    seen.push(part instanceof vscode.LanguageModelToolCallPart
      ? { call: part.name, id: part.callId, input: part.input } : { text: part.value });
  }
  return seen;
}

exports.activate = async () => {
  log({ activated: true });
  try {
    // None until the person gives llmgw a key: llmgw's provider says its models have changed then.
    let models = [];
    for (let i = 0; i < 600 && !models.length; i++) {
      models = await vscode.lm.selectChatModels({ vendor: 'llmgw' });
      if (!models.length) {
        await sleep(250);
      }
    }
    log({ models: models.map((m) => ({ id: m.id, vendor: m.vendor, family: m.family,
      maxInputTokens: m.maxInputTokens })) });
    const model = models.find((m) => m.id === process.env.LLMGW_PROBE_MODEL);
    const tools = [{ name: 'get_weather', description: 'The weather in a city now.',
      inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
    const ask = vscode.LanguageModelChatMessage.User('What is the weather? Use get_weather.');
    const token = new vscode.CancellationTokenSource().token;
    const first = await parts(await model.sendRequest([ask], { tools }, token));
    log({ first });
    const call = first.find((p) => p.call);
    const messages = [ask,
      vscode.LanguageModelChatMessage.Assistant([new vscode.LanguageModelToolCallPart(call.id, call.call, call.input)]),
      vscode.LanguageModelChatMessage.User([new vscode.LanguageModelToolResultPart(call.id,
        [new vscode.LanguageModelTextPart('Sunny, 21 C')])])];
    log({ second: await parts(await model.sendRequest(messages, { tools }, token)) });
  } catch (error) {
    log({ error: String((error && error.stack) || error) });
  }
};

exports.deactivate = () => {};
