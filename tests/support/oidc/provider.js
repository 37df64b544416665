// A real OpenID provider (npm's certified oidc-provider) for llmgw's sign-in tests, on loopback only.
//
//   node provider.js STATE.json
//
// STATE.json: {"client": {"client_id", "client_secret", "redirect_uris": [...]}, "signing_key": JWK,
//              "users": {"ada": {"email", "name", "groups": [...]}, ...}}
// Users are read from the file at every sign-in, so a test changes someone's groups by rewriting it.
// The login page is oidc-provider's development interaction: any password is accepted for a known login.
// Consent is given by the provider itself (loadExistingGrant), as for a company's own application.
// It listens on a port the kernel gives (no port picked beforehand that another process could take in
// between), and prints "ready ISSUER" once it does. The signing key comes made, in the state file.

import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const statePath = process.argv[2];
const state = () => JSON.parse(readFileSync(statePath, 'utf8'));
const { client, signing_key: signingKey } = state();
const signing = { ...signingKey, kid: 'test-key-1', use: 'sig', alg: 'RS256' };

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = makeProvider(issuer);
  server.on('request', provider.callback());
  console.log(`ready ${issuer}`);
});

function makeProvider(issuer) {
  return new Provider(issuer, {
    clients: [{
      client_id: client.client_id,
      client_secret: client.client_secret,
      redirect_uris: client.redirect_uris,
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code'],
      response_types: ['code'],
    }],
    pkce: { required: () => true },
    jwks: { keys: [signing] },
    cookies: { keys: ['llmgw-test-cookie-key'] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
    scopes: ['openid', 'email', 'profile', 'groups'],
    // The claims in the ID token itself, as Keycloak and Entra ID send them, not only at userinfo.
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true } },
    async findAccount(ctx, id) {
      const user = state().users[id];
      if (!user) return undefined;
      return {
        accountId: id,
        async claims() {
          const now = state().users[id] || user;
          return { sub: id, email: now.email, email_verified: true, name: now.name, groups: now.groups };
        },
      };
    },
    async loadExistingGrant(ctx) {
      const accountId = ctx.oidc.session.accountId;
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId });
      grant.addOIDCScope('openid email profile groups');
      grant.addOIDCClaims(['email', 'email_verified', 'name', 'groups']);
      await grant.save();
      return grant;
    },
  });
}
