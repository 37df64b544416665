// A real OpenID provider (npm's certified oidc-provider) for llmgw's sign-in tests, on loopback only.
//
//   node provider.js STATE.json
//
// STATE.json: {"client": {"client_id", "client_secret", "redirect_uris": [...]}, "signing_key": JWK,
//              "users": {"ada": {"email", "name", "groups": [...]}, ...}}
// A user may also carry email_verified (true when left out; null: not sent at all, as Entra ID does),
// preferred_username, upn and xms_edov, sent as written; "email": null sends no e-mail.
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
    claims: { openid: ['sub'], email: ['email', 'email_verified', 'xms_edov'],
              profile: ['name', 'preferred_username', 'upn'], groups: ['groups'] },
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
          const claims = { sub: id, email: now.email, email_verified: true, name: now.name, groups: now.groups };
          for (const name of ['email_verified', 'preferred_username', 'upn', 'xms_edov']) {
            if (name in now) claims[name] = now[name];
          }
          // null: the claim is not sent at all (JSON has no undefined).
          for (const name of Object.keys(claims)) if (claims[name] === null) delete claims[name];
          return claims;
        },
      };
    },
    async loadExistingGrant(ctx) {
      const accountId = ctx.oidc.session.accountId;
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId });
      grant.addOIDCScope('openid email profile groups');
      grant.addOIDCClaims(['email', 'email_verified', 'xms_edov', 'name', 'preferred_username', 'upn', 'groups']);
      await grant.save();
      return grant;
    },
  });
}
