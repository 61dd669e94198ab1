import Foundation
import KeymgrCore

/// The reference server's authorization server: a stand-in for Curity (and any RFC server) that
/// speaks the public wire formats.
///
/// Endpoints (paths as Curity's; `{issuer}` = base URL + `OAuthServerConfiguration.issuerPath`):
/// - `GET /.well-known/oauth-authorization-server` (RFC 8414; also `{issuer}/.well-known/…`; off with
///   `servesAuthorizationServerMetadata = false` / `--openid-discovery-only`) and
///   `GET /.well-known/openid-configuration`: issuer, token, registration, revocation, device authorization
///   and userinfo endpoints, `grant_types_supported`, `token_endpoint_auth_methods_supported`,
///   `dpop_signing_alg_values_supported` (ES256), …. The `authorization_endpoint` listed is not served.
/// - `POST /oauth/v2/oauth-dynamic-client-registration` (RFC 7591): `Authorization: Bearer <initial access
///   token>` when any is configured; body `{"software_id":"<template>", …}` (the template's metadata wins,
///   extension fields such as `device_name`, `os_name` are kept) or full metadata. 201 with `client_id`,
///   `client_secret`, `client_id_issued_at`, `client_secret_expires_at` (0), `registration_client_uri`,
///   `registration_access_token`, `registration_access_token_expires_in` and every metadata member.
/// - `GET | PUT | DELETE /oauth/v2/oauth-dynamic-client-registration/{client_id}` (RFC 7592) with the
///   registration access token: GET and PUT rotate the registration access token and the client secret
///   (Curity's default); PUT replaces all metadata and refuses `registration_access_token`,
///   `registration_client_uri`, `client_secret_expires_at`, `client_id_issued_at` (400
///   `invalid_client_metadata`); DELETE 204; an unknown, deleted or revoked client or a wrong token → 401.
///   After `registrationTokenLifetime` only DELETE works.
/// - `POST /oauth/v2/oauth-token` (RFC 6749, form-encoded): `refresh_token` (rotation: the used refresh token
///   dies at once, its reuse is `invalid_grant`) and `urn:ietf:params:oauth:grant-type:device_code` (RFC 8628:
///   `authorization_pending`, `slow_down` (+5 s), `expired_token`, `access_denied`). Client authentication by
///   the client's `token_endpoint_auth_method` (`client_secret_basic`, `client_secret_post`, `none`); else
///   401 `invalid_client`. DPoP (RFC 9449): a proof binds the tokens (`token_type` `DPoP`, `cnf.jkt` in the
///   admin listing); a bound refresh token needs a proof by the same key; with `issuesTokenBoundTokens`
///   (Curity's `issue-token-bound-authorization-code`) a request without a proof gets `invalid_dpop_proof`;
///   with `requiresDPoPNonce`, 400 `use_dpop_nonce` + `DPoP-Nonce` until the proof carries a current nonce.
/// - `POST /oauth/v2/oauth-revoke` (RFC 7009): client authentication; revokes an access token, or a refresh
///   token with its grant's access tokens; 200 for unknown tokens.
/// - `POST /oauth/v2/oauth-device-authorization` (RFC 8628): `device_code`, `user_code` (`BCDF-GHJK`),
///   `verification_uri` (`/oauth/v2/oauth-device`, a plain page), `verification_uri_complete`, `expires_in`,
///   `interval`.
/// - `POST /oauth/v2/oauth-introspect` (RFC 7662, client authentication): `active`, `scope`, `client_id`, `sub`,
///   `exp`, `token_type` and, for a DPoP-bound token, `cnf.jkt` (RFC 9449 §6.2).
/// - `GET | POST /oauth/v2/oauth-userinfo`: the protected resource. `Authorization: DPoP <at>` with a proof
///   carrying `ath` (or `Bearer <at>` for an unbound token); with `resourceRequiresDPoPNonce`, 401
///   `WWW-Authenticate: DPoP error="use_dpop_nonce"` + `DPoP-Nonce`. Answers `{"sub","client_id","scope"}`.
///
/// Test surface (`/__refserver/oauth/…`, admin credential; Swift API on `ReferenceServer` too):
/// `GET clients`, `DELETE clients/{id}` (server-side deletion), `POST clients/{id}/revoke` (status revoked),
/// `GET tokens` (every token with `kind`, `client_id`, `subject`, `jkt`, `status`, `presentations`),
/// `POST tokens {"client_id","subject","scope"?,"jkt"?}` (mints a token response, as if a login happened),
/// `GET device`, `POST device/approve {"user_code","subject"}`, `POST device/deny {"user_code"}`,
/// `POST device/expire {"user_code"}`, `POST nonces/rotate`, `GET faults`,
/// `PUT faults/{endpoint} {"fault":…,"count"?}` (endpoints: discovery, registration, management, token,
/// revocation, device_authorization, resource, introspection; faults: see `OAuthFault`), `DELETE faults[/{endpoint}]`.
///
/// Switches (`OAuthServerConfiguration`, and the `keymgr-refserver` flags in parentheses): initial access
/// tokens (`--oauth-initial-access-token-file`), templates (`--oauth-templates FILE`), bound tokens
/// (`--oauth-token-bound`), nonces (`--oauth-dpop-nonce`, `--oauth-resource-dpop-nonce`), OpenID discovery only
/// (`--oauth-openid-discovery-only`), issuer path (`--oauth-issuer-path`), and whose reading of the RFCs it follows
/// (`OAuthServerMode`, `--oauth-mode curity|oauthlib`): in `oauthlib` mode the device authorization endpoint wants
/// `client_id` and an exact form `Content-Type`, is left out of discovery and answers without `interval` and
/// `verification_uri_complete`; DPoP proofs are ignored (Bearer only); `invalid_client` carries a Bearer challenge.
struct OAuthRoutes: Sendable {
    let handler: RequestHandler

    private var configuration: OAuthServerConfiguration { handler.configuration.oauth }
    private var store: OAuthStore { handler.oauth.store }
    private var state: OAuthState { handler.oauth.state }

    /// The answer for an authorization server path, or nil when the path is not one.
    func respond(to request: IncomingRequest) async -> Response? {
        let segments = request.target.segments
        let issuer = configuration.issuerSegments
        for (document, openID) in [("oauth-authorization-server", false), ("openid-configuration", true)] {
            if segments == [".well-known", document] + issuer || segments == issuer + [".well-known", document] {
                if !openID, !configuration.servesAuthorizationServerMetadata { return nil }
                return await guarded(.discovery, request) { _ in try await discovery(openID: openID) }
            }
        }
        switch segments {
        case OAuthPath.token:
            return await guarded(.token, request, methods: [.post]) { faults in try await token(request, faults) }
        case OAuthPath.registration:
            return await guarded(.registration, request, methods: [.post]) { faults in
                try await register(request, faults)
            }
        case OAuthPath.registration + [segments.last ?? ""] where segments.count == OAuthPath.registration.count + 1:
            return await guarded(.management, request, methods: [.get, .put, .delete]) { faults in
                try await manage(request, clientId: segments[segments.count - 1], faults)
            }
        case OAuthPath.revocation:
            return await guarded(.revocation, request, methods: [.post]) { _ in try await revoke(request) }
        case OAuthPath.deviceAuthorization:
            return await guarded(.deviceAuthorization, request, methods: [.post]) { _ in
                try await deviceAuthorization(request)
            }
        case OAuthPath.deviceVerification:
            let page = "Enter the code shown on your device: \(request.target.parameter("user_code") ?? "")\n"
            return Response(
                status: .ok, headers: [.contentType: "text/plain; charset=utf-8"],
                body: Array(page.utf8))
        case OAuthPath.introspection:
            return await guarded(.introspection, request, methods: [.post]) { _ in try await introspect(request) }
        case OAuthPath.userinfo:
            return await guarded(.resource, request, methods: [.get, .post]) { faults in
                try await userinfo(request, faults)
            }
        default:
            return nil
        }
    }

    /// Applies the endpoint's faults, runs `body`, and turns `OAuthError`s into OAuth error responses.
    private func guarded(
        _ endpoint: OAuthEndpoint, _ request: IncomingRequest, methods: [HTTPMethod] = [.get],
        _ body: (OAuthFaultSet) async throws -> Response
    ) async -> Response {
        let faults = await state.takeFaults(endpoint)
        switch faults.outage {
        case .delay(let seconds):
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
        case .status500:
            return errorResponse(OAuthError(status: 500, "server_error", "Internal Server Error"), faults)
        case .status503(let retryAfter):
            var headers = HTTPHeaders()
            headers[.retryAfter] = String(retryAfter)
            return jsonResponse(
                OAuthError(status: 503, "temporarily_unavailable", "Service Unavailable").json, status: 503,
                headers: headers)
        case .malformedJSON:
            return rawJSONResponse(Data(#"{"access_token":"truncated","token_ty"#.utf8))
        case .garbageTokenResponse:
            return jsonResponse(.object(["token_type": "DPoP", "expires_in": "soon", "status": "ok"]))
        case .wrongContentType:
            return Response(
                status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
                body: Array("<html><body>Maintenance</body></html>".utf8))
        case .connectionReset:
            return await ConnectionFaults.reset(request)
        case .hugeBody:
            let padding = String(repeating: "x", count: Self.hugeBodySize)
            return jsonResponse(.object([
                "access_token": "padded", "token_type": "Bearer", "expires_in": 3600, "client_id": "padded",
                "_padding": .string(padding),
            ]))
        case .truncatedBody:
            return await ConnectionFaults.truncated(await answer(request, methods: methods, faults, body))
        case .slowBody(let seconds):
            return await ConnectionFaults.trickled(await answer(request, methods: methods, faults, body), over: seconds)
        default:
            break
        }
        return await answer(request, methods: methods, faults, body)
    }

    /// Size of the `hugeBody` fault's padding.
    static let hugeBodySize = 10 * 1024 * 1024

    /// The endpoint's own answer, OAuth errors as OAuth error responses.
    private func answer(
        _ request: IncomingRequest, methods: [HTTPMethod], _ faults: OAuthFaultSet,
        _ body: (OAuthFaultSet) async throws -> Response
    ) async -> Response {
        do {
            guard methods.contains(request.method) else {
                throw OAuthError(status: 405, "invalid_request", "\(request.method.rawValue) is not allowed here")
            }
            return try await body(faults)
        } catch let error as OAuthError {
            return errorResponse(error, faults)
        } catch {
            handler.configuration.logger.error("OAuth request failed: \(String(describing: error))")
            return errorResponse(OAuthError(status: 500, "server_error", "Internal Server Error"), faults)
        }
    }

    private func errorResponse(_ error: OAuthError, _ faults: OAuthFaultSet) -> Response {
        var status = error.status
        if error.error == "invalid_dpop_proof", status == 400 { status = faults.dpopErrorStatus }
        var headers = HTTPHeaders()
        headers.set("Pragma", "no-cache")
        if let challenge = error.wwwAuthenticate { headers[.wwwAuthenticate] = challenge }
        if let nonce = error.dpopNonce { headers.set("DPoP-Nonce", nonce) }
        return jsonResponse(error.json, status: status, headers: headers)
    }

    private func baseURL() async -> String { await state.baseURL }

    private func endpoint(_ segments: [String]) async -> String { await baseURL() + OAuthPath.string(segments) }

    /// The request's URL without query, as a DPoP `htu` must name it.
    private func requestURL(_ request: IncomingRequest) async -> String {
        let path = request.rawTarget.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first
        return await baseURL() + (path.map(String.init) ?? "/")
    }

    private func dpopVerifier(now: Date) -> DPoPVerifier {
        DPoPVerifier(
            state: state, now: now, proofLifetime: configuration.dpopProofLifetime,
            skew: handler.configuration.allowedClockSkew, nonceLifetime: configuration.dpopNonceLifetime)
    }

    // MARK: discovery

    private func discovery(openID: Bool) async throws -> Response {
        let base = await baseURL()
        let methods: JSONValue = .array(ClientAuthMethod.all.map { .string($0) })
        var members: [String: JSONValue] = [
            "issuer": .string(base + configuration.issuerPath),
            "authorization_endpoint": .string(base + "/oauth/v2/oauth-authorize"),
            "token_endpoint": .string(base + OAuthPath.string(OAuthPath.token)),
            "registration_endpoint": .string(base + OAuthPath.string(OAuthPath.registration)),
            "revocation_endpoint": .string(base + OAuthPath.string(OAuthPath.revocation)),
            "userinfo_endpoint": .string(base + OAuthPath.string(OAuthPath.userinfo)),
            "introspection_endpoint": .string(base + OAuthPath.string(OAuthPath.introspection)),
            "grant_types_supported": [.string(GrantType.refreshToken), .string(GrantType.deviceCode)],
            "response_types_supported": ["code"],
            "token_endpoint_auth_methods_supported": methods,
            "revocation_endpoint_auth_methods_supported": methods,
            "dpop_signing_alg_values_supported": ["ES256"],
            "scopes_supported": .array(configuration.scopesSupported.map { .string($0) }),
        ]
        if configuration.advertisesDeviceAuthorizationEndpoint {
            members["device_authorization_endpoint"] = .string(base + OAuthPath.string(OAuthPath.deviceAuthorization))
        }
        if !configuration.supportsDPoP { members["dpop_signing_alg_values_supported"] = nil }
        if openID {
            members["subject_types_supported"] = ["public"]
            members["id_token_signing_alg_values_supported"] = ["ES256"]
        }
        return jsonResponse(.object(members))
    }

    // MARK: registration (RFC 7591 / RFC 7592)

    private func register(_ request: IncomingRequest, _ faults: OAuthFaultSet) async throws -> Response {
        if !configuration.initialAccessTokens.isEmpty {
            guard let presented = OAuthRoutes.bearerToken(request),
                configuration.initialAccessTokens.contains(where: { constantTimeEqual($0, presented) })
            else { throw OAuthError.invalidToken("A valid initial access token is required to register") }
        }
        let body = try OAuthRoutes.jsonObjectBody(request)
        var template: String?
        if let softwareId = body["software_id"]?.stringValue,
            configuration.templates.contains(where: { $0.name == softwareId })
        {
            template = softwareId
        } else if !configuration.allowsFullMetadataRegistration {
            throw OAuthError.invalidClientMetadata("software_id must name a template client")
        }
        let metadata = try clientMetadata(from: body, template: template)
        let now = handler.configuration.clock().timeIntervalSince1970
        let isPublic = metadata["token_endpoint_auth_method"]?.stringValue == ClientAuthMethod.none
        let client = OAuthClientRow(
            clientId: UUID().uuidString.lowercased(), clientSecret: isPublic ? nil : try randomToken(bytes: 32),
            registrationToken: try randomToken(bytes: 32),
            registrationTokenExpiresAt: now + configuration.registrationTokenLifetime,
            metadataJSON: String(decoding: JSONValue.object(metadata).encoded(), as: UTF8.self),
            template: template, issuedAt: now.rounded(.down), status: "active")
        try await store.insert(client)
        return await registrationResponse(client, status: faults.has(.registration200) ? 200 : 201, faults)
    }

    /// The members a client may not set: the server issues them (RFC 7591 §3.2.1, RFC 7592 §2.2).
    static let serverIssuedMembers = [
        "client_id", "client_secret", "registration_access_token", "registration_client_uri",
        "client_id_issued_at", "client_secret_expires_at", "registration_access_token_expires_in",
    ]

    /// The stored metadata: what the client sent (extension members kept), the template's members on top,
    /// RFC 7591 defaults filled in, and every known member checked.
    private func clientMetadata(from body: [String: JSONValue], template: String?) throws -> [String: JSONValue] {
        var metadata = body
        for name in OAuthRoutes.serverIssuedMembers { metadata[name] = nil }
        if let template, let found = configuration.templates.first(where: { $0.name == template }) {
            for (name, value) in found.metadata { metadata[name] = value }
        }
        if metadata["grant_types"] == nil { metadata["grant_types"] = [.string(GrantType.authorizationCode)] }
        if metadata["token_endpoint_auth_method"] == nil {
            metadata["token_endpoint_auth_method"] = .string(ClientAuthMethod.basic)
        }
        guard let grants = metadata["grant_types"]?.arrayValue?.compactMap(\.stringValue),
            grants.count == metadata["grant_types"]?.arrayValue?.count, !grants.isEmpty
        else { throw OAuthError.invalidClientMetadata("grant_types must be a non-empty array of strings") }
        for grant in grants where !GrantType.registrable.contains(grant) {
            throw OAuthError.invalidClientMetadata("grant type \(grant) is not supported")
        }
        guard let method = metadata["token_endpoint_auth_method"]?.stringValue, ClientAuthMethod.all.contains(method)
        else {
            throw OAuthError.invalidClientMetadata(
                "token_endpoint_auth_method must be one of \(ClientAuthMethod.all.joined(separator: ", "))")
        }
        for name in ["scope", "client_name", "software_id", "software_version", "application_type"] {
            if let value = metadata[name], value.stringValue == nil {
                throw OAuthError.invalidClientMetadata("\(name) must be a string")
            }
        }
        if let uris = metadata["redirect_uris"] {
            guard let list = uris.arrayValue, list.allSatisfy({ $0.stringValue.flatMap(URL.init(string:)) != nil })
            else { throw OAuthError("invalid_redirect_uri", "redirect_uris must be an array of URIs") }
        }
        if grants.contains(GrantType.authorizationCode), (metadata["redirect_uris"]?.arrayValue ?? []).isEmpty {
            throw OAuthError("invalid_redirect_uri", "the authorization_code grant needs redirect_uris")
        }
        return metadata
    }

    private func registrationResponse(_ client: OAuthClientRow, status: Int, _ faults: OAuthFaultSet) async -> Response {
        var members = client.metadata
        let now = handler.configuration.clock().timeIntervalSince1970
        members["client_id"] = .string(client.clientId)
        members["client_id_issued_at"] = .int(Int64(client.issuedAt))
        if let secret = client.clientSecret {
            members["client_secret"] = .string(secret)
            members["client_secret_expires_at"] = 0
        }
        let managementBase = if let foreign = faults.foreignRegistrationClientURI { foreign } else { await endpoint(OAuthPath.registration) }
        members["registration_client_uri"] = .string(managementBase + "/" + PathEncoding.segment(client.clientId))
        members["registration_access_token"] = .string(client.registrationToken)
        members["registration_access_token_expires_in"] = .int(
            Int64(max(0, client.registrationTokenExpiresAt - now).rounded(.down)))
        if faults.has(.authMethodAsArray), let method = members["token_endpoint_auth_method"] {
            members["token_endpoint_auth_method"] = .array([method])
        }
        var headers = HTTPHeaders()
        headers.set("Pragma", "no-cache")
        return jsonResponse(.object(members), status: status, headers: headers)
    }

    private func manage(_ request: IncomingRequest, clientId: String, _ faults: OAuthFaultSet) async throws -> Response {
        let now = handler.configuration.clock().timeIntervalSince1970
        guard let presented = OAuthRoutes.bearerToken(request),
            var client = try await store.client(clientId), client.status == "active",
            constantTimeEqual(presented, client.registrationToken)
        else {
            let description = "The registration access token is not valid for this client"
            switch configuration.refusedRegistrationTokenStatus {
            case 400: throw OAuthError(status: 400, "access_denied", description)
            case 403: throw OAuthError(status: 403, "access_denied", description)
            default: throw OAuthError.invalidToken(description)
            }
        }
        if request.method == .delete {
            _ = try await store.deleteClient(clientId)
            return Response(status: .noContent)
        }
        guard client.registrationTokenExpiresAt > now else {
            throw OAuthError.invalidToken("The registration access token has expired; only DELETE is allowed")
        }
        if request.method == .put {
            let body = try OAuthRoutes.jsonObjectBody(request)
            for name in ["registration_access_token", "registration_client_uri", "client_secret_expires_at", "client_id_issued_at"]
            where body[name] != nil {
                throw OAuthError.invalidClientMetadata("\(name) must not be sent in an update")
            }
            guard body["client_id"]?.stringValue == clientId else {
                throw OAuthError.invalidClientMetadata("client_id must be sent and match the client")
            }
            if let secret = body["client_secret"] {
                guard let text = secret.stringValue, let current = client.clientSecret, constantTimeEqual(text, current)
                else { throw OAuthError.invalidClientMetadata("client_secret does not match the client's") }
            }
            let metadata = try clientMetadata(from: body, template: client.template)
            let wasPublic = client.clientSecret == nil
            let isPublic = metadata["token_endpoint_auth_method"]?.stringValue == ClientAuthMethod.none
            if wasPublic != isPublic { client.clientSecret = isPublic ? nil : try randomToken(bytes: 32) }
            client.metadataJSON = String(decoding: JSONValue.object(metadata).encoded(), as: UTF8.self)
        }
        if configuration.rotatesRegistrationCredentials {
            client.registrationToken = try randomToken(bytes: 32)
            client.registrationTokenExpiresAt = now + configuration.registrationTokenLifetime
            if client.clientSecret != nil { client.clientSecret = try randomToken(bytes: 32) }
        }
        try await store.save(client)
        return await registrationResponse(client, status: 200, faults)
    }

    // MARK: token endpoint

    private func token(_ request: IncomingRequest, _ faults: OAuthFaultSet) async throws -> Response {
        let form = try OAuthRoutes.form(request)
        guard let grantType = form["grant_type"], !grantType.isEmpty else {
            throw OAuthError.invalidRequest("grant_type is required")
        }
        if grantType == GrantType.refreshToken, let presented = form["refresh_token"] {
            try await store.countPresentation(of: presented)
        }
        do {
            let client = try await authenticateClient(request, form: form)
            guard grantType == GrantType.refreshToken || grantType == GrantType.deviceCode else {
                throw OAuthError("unsupported_grant_type", "grant type \(grantType) is not supported")
            }
            guard client.grantTypes.contains(grantType) else {
                throw OAuthError("unauthorized_client", "the client may not use the grant type \(grantType)")
            }
            let now = handler.configuration.clock()
            // A server without DPoP ignores the header (oauthlib): the tokens are Bearer.
            let supportsDPoP = configuration.supportsDPoP && !faults.has(.dpopSwitchedOff)
            let proofs = supportsDPoP ? request.headers.values(named: "DPoP") : []
            var proof: DPoPProof?
            if !proofs.isEmpty {
                proof = try await dpopVerifier(now: now).verify(
                    headerValues: proofs, method: request.method.rawValue, url: await requestURL(request),
                    accessToken: nil, nonceIssuer: configuration.requiresDPoPNonce ? .authorizationServer : nil)
            } else if configuration.issuesTokenBoundTokens, supportsDPoP {
                throw OAuthError.invalidDPoPProof("this server issues only DPoP-bound tokens: a DPoP proof is required")
            }
            let tokens: [OAuthTokenRow]
            if grantType == GrantType.refreshToken {
                tokens = try await refresh(form: form, client: client, proof: proof, supportsDPoP: supportsDPoP, now: now)
            } else {
                tokens = try await redeemDeviceCode(form: form, client: client, proof: proof, now: now)
            }
            var headers = HTTPHeaders()
            if configuration.requiresDPoPNonce {
                headers.set(
                    "DPoP-Nonce",
                    try await state.nonce(.authorizationServer, now: now, lifetime: configuration.dpopNonceLifetime))
            }
            return tokenResponse(tokens, faults: faults, headers: headers)
        } catch let error as OAuthError where error.error == "invalid_grant" && grantType == GrantType.refreshToken {
            guard faults.has(.emptyBodyOnInvalidGrant) else { throw error }
            return Response(status: .badRequest, headers: [.cacheControl: "no-store"])
        }
    }

    /// RFC 6749 §6 with rotation: in one transaction, check the refresh token, spend it, issue the new set.
    private func refresh(
        form: [String: String], client: OAuthClientRow, proof: DPoPProof?, supportsDPoP: Bool, now: Date
    ) async throws -> [OAuthTokenRow] {
        guard let presented = form["refresh_token"], !presented.isEmpty else {
            throw OAuthError.invalidRequest("refresh_token is required")
        }
        let requestedScope = form["scope"]
        let configuration = self.configuration
        let result: Result<[OAuthTokenRow], OAuthError> = try await store.transaction { db in
            guard var row = try OAuthTokenRow.fetchOne(db, key: presented), row.kind == "refresh",
                row.clientId == client.clientId, row.status == "active", row.expiresAt > now.timeIntervalSince1970
            else { return .failure(.invalidGrant("The refresh token is not valid")) }
            // A server without DPoP knows no binding (a token bound before it was switched off refreshes as Bearer).
            if supportsDPoP, let bound = row.jkt, proof?.jkt != bound {
                return .failure(.invalidDPoPProof("the refresh token is bound to another DPoP key"))
            }
            var scope = row.scope
            if let requestedScope {
                let granted = Set(row.scope.split(separator: " "))
                guard Set(requestedScope.split(separator: " ")).isSubset(of: granted) else {
                    return .failure(OAuthError("invalid_scope", "the requested scope exceeds the granted scope"))
                }
                scope = requestedScope
            }
            row.status = "used"
            try row.update(db)
            let tokens = try OAuthRoutes.makeTokens(
                clientId: client.clientId, subject: row.subject, scope: scope, accessJKT: proof?.jkt,
                refreshJKT: supportsDPoP ? row.jkt : nil, grantId: row.grantId, withRefresh: true, now: now, configuration: configuration)
            for token in tokens { try token.insert(db) }
            return .success(tokens)
        }
        return try result.get()
    }

    /// RFC 8628 §3.5: the device's polling.
    private func redeemDeviceCode(
        form: [String: String], client: OAuthClientRow, proof: DPoPProof?, now: Date
    ) async throws -> [OAuthTokenRow] {
        guard let deviceCode = form["device_code"], !deviceCode.isEmpty else {
            throw OAuthError.invalidRequest("device_code is required")
        }
        let configuration = self.configuration
        let withRefresh = client.grantTypes.contains(GrantType.refreshToken)
        let result: Result<[OAuthTokenRow], OAuthError> = try await store.transaction { db in
            guard var row = try OAuthDeviceCodeRow.fetchOne(db, key: deviceCode), row.clientId == client.clientId,
                row.status != "redeemed"
            else { return .failure(.invalidGrant("The device code is not valid")) }
            let current = now.timeIntervalSince1970
            guard current < row.expiresAt else {
                return .failure(OAuthError("expired_token", "The device code has expired"))
            }
            switch row.status {
            case "denied":
                return .failure(OAuthError("access_denied", "The user denied the request"))
            case "approved":
                row.status = "redeemed"
                try row.update(db)
                let tokens = try OAuthRoutes.makeTokens(
                    clientId: client.clientId, subject: row.subject ?? "", scope: row.scope, accessJKT: proof?.jkt,
                    refreshJKT: proof?.jkt, grantId: try randomToken(bytes: 16), withRefresh: withRefresh, now: now,
                    configuration: configuration)
                for token in tokens { try token.insert(db) }
                return .success(tokens)
            default:
                let tooFast = row.lastPoll.map { current - $0 < Double(row.interval) } ?? false
                row.lastPoll = current
                if tooFast { row.interval += 5 }
                try row.update(db)
                return .failure(
                    tooFast
                        ? OAuthError("slow_down", "Polling too fast: wait \(row.interval) seconds between requests")
                        : OAuthError("authorization_pending", "The user has not yet completed the authorization"))
            }
        }
        return try result.get()
    }

    /// A new access token (and refresh token), bound to the given DPoP key thumbprints.
    static func makeTokens(
        clientId: String, subject: String, scope: String, accessJKT: String?, refreshJKT: String?, grantId: String,
        withRefresh: Bool, now: Date, configuration: OAuthServerConfiguration
    ) throws -> [OAuthTokenRow] {
        let issuedAt = now.timeIntervalSince1970
        var tokens = [
            OAuthTokenRow(
                token: try randomToken(bytes: 32), kind: "access", clientId: clientId, subject: subject, scope: scope,
                jkt: accessJKT, grantId: grantId, issuedAt: issuedAt,
                expiresAt: issuedAt + configuration.accessTokenLifetime, status: "active", presentations: 0)
        ]
        if withRefresh {
            tokens.append(
                OAuthTokenRow(
                    token: try randomToken(bytes: 32), kind: "refresh", clientId: clientId, subject: subject,
                    scope: scope, jkt: refreshJKT, grantId: grantId, issuedAt: issuedAt,
                    expiresAt: issuedAt + configuration.refreshTokenLifetime, status: "active", presentations: 0))
        }
        return tokens
    }

    /// RFC 6749 §5.1 (RFC 9449 §5: `token_type` `DPoP` for a bound access token).
    static func tokenResponseJSON(_ tokens: [OAuthTokenRow], lowercase: Bool = false) -> JSONValue {
        guard let access = tokens.first(where: { $0.kind == "access" }) else { return .object([:]) }
        let tokenType = access.jkt == nil ? "Bearer" : "DPoP"
        var members: [String: JSONValue] = [
            "access_token": .string(access.token),
            "token_type": .string(lowercase ? tokenType.lowercased() : tokenType),
            "expires_in": .int(Int64((access.expiresAt - access.issuedAt).rounded())),
            "scope": .string(access.scope),
        ]
        if let refresh = tokens.first(where: { $0.kind == "refresh" }) {
            members["refresh_token"] = .string(refresh.token)
        }
        return .object(members)
    }

    private func tokenResponse(_ tokens: [OAuthTokenRow], faults: OAuthFaultSet, headers: HTTPHeaders) -> Response {
        var headers = headers
        headers.set("Pragma", "no-cache")
        return jsonResponse(
            OAuthRoutes.tokenResponseJSON(tokens, lowercase: faults.has(.lowercaseTokenType)), headers: headers)
    }

    // MARK: client authentication

    /// RFC 6749 §2.3.1: HTTP Basic (form-encoded id and secret) or `client_id` + `client_secret` in the body,
    /// whichever the client registered; `none` for public clients.
    private func authenticateClient(_ request: IncomingRequest, form: [String: String]) async throws -> OAuthClientRow {
        var method = ClientAuthMethod.none
        var clientId = form["client_id"]
        var secret: String?
        let basicChallenge = configuration.invalidClientChallengeScheme == "Basic"
            ? #"Basic realm="oauth""# : configuration.invalidClientChallengeScheme + #" error="invalid_client""#
        if let authorization = request.headers[.authorization] {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "basic" else {
                throw OAuthError(status: 401, "invalid_client", "Client authentication failed", wwwAuthenticate: basicChallenge)
            }
            guard let decoded = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
                let text = String(data: decoded, encoding: .utf8),
                let colon = text.firstIndex(of: ":"),
                let id = RawTarget.percentDecode(String(text[..<colon]), plusIsSpace: true),
                let password = RawTarget.percentDecode(String(text[text.index(after: colon)...]), plusIsSpace: true)
            else {
                throw OAuthError(status: 401, "invalid_client", "Client authentication failed", wwwAuthenticate: basicChallenge)
            }
            guard form["client_secret"] == nil else {
                throw OAuthError.invalidRequest("use only one client authentication method")
            }
            if let clientId, clientId != id { throw OAuthError.invalidRequest("client_id differs from the Basic credentials") }
            method = ClientAuthMethod.basic
            clientId = id
            secret = password
        } else if let posted = form["client_secret"] {
            method = ClientAuthMethod.post
            secret = posted
        }
        let challenge = method == ClientAuthMethod.basic ? basicChallenge : nil
        let failure = OAuthError(status: 401, "invalid_client", "Client authentication failed", wwwAuthenticate: challenge)
        guard let clientId, let client = try await store.client(clientId), client.status == "active",
            client.authMethod == method
        else { throw failure }
        if method != ClientAuthMethod.none {
            guard let secret, let expected = client.clientSecret, constantTimeEqual(secret, expected) else { throw failure }
        }
        return client
    }

    // MARK: revocation (RFC 7009)

    private func revoke(_ request: IncomingRequest) async throws -> Response {
        let form = try OAuthRoutes.form(request)
        let client = try await authenticateClient(request, form: form)
        guard let presented = form["token"], !presented.isEmpty else { throw OAuthError.invalidRequest("token is required") }
        // The hint only speeds a lookup up (§2.1); one table holds both kinds here.
        if let row = try await store.token(presented), row.clientId == client.clientId {
            try await store.revoke(row)
        }
        return Response(status: .ok, headers: [.cacheControl: "no-store"])
    }

    // MARK: introspection (RFC 7662)

    /// `{"active":false}` for anything not live; else scope, client, subject, times, `token_type` and,
    /// for a DPoP-bound token, `cnf.jkt` (RFC 9449 §6.2).
    private func introspect(_ request: IncomingRequest) async throws -> Response {
        let form = try OAuthRoutes.form(request)
        _ = try await authenticateClient(request, form: form)
        guard let presented = form["token"], !presented.isEmpty else { throw OAuthError.invalidRequest("token is required") }
        let now = handler.configuration.clock().timeIntervalSince1970
        guard let row = try await store.token(presented), row.status == "active", row.expiresAt > now,
            let client = try await store.client(row.clientId), client.status == "active"
        else { return jsonResponse(.object(["active": false])) }
        var members: [String: JSONValue] = [
            "active": true, "scope": .string(row.scope), "client_id": .string(row.clientId),
            "sub": .string(row.subject), "iat": .int(Int64(row.issuedAt)), "exp": .int(Int64(row.expiresAt)),
            "iss": .string(await baseURL() + configuration.issuerPath),
            "token_type": .string(row.kind == "refresh" ? "refresh_token" : (row.jkt == nil ? "Bearer" : "DPoP")),
        ]
        if let jkt = row.jkt { members["cnf"] = .object(["jkt": .string(jkt)]) }
        return jsonResponse(.object(members))
    }

    // MARK: device authorization (RFC 8628)

    private func deviceAuthorization(_ request: IncomingRequest) async throws -> Response {
        if configuration.requiresExactFormContentType,
            request.headers[.contentType] != "application/x-www-form-urlencoded"
        {
            throw OAuthError.invalidRequest("Content-Type must be application/x-www-form-urlencoded")
        }
        let form = try OAuthRoutes.form(request)
        if configuration.requiresClientIdInDeviceAuthorization, (form["client_id"] ?? "").isEmpty {
            throw OAuthError.invalidRequest("Missing client_id parameter.")
        }
        let client = try await authenticateClient(request, form: form)
        guard client.grantTypes.contains(GrantType.deviceCode) else {
            throw OAuthError("unauthorized_client", "the client may not use the device authorization grant")
        }
        let registered = client.metadata["scope"]?.stringValue
        var scope = registered ?? ""
        if let requested = form["scope"] {
            if let registered {
                guard Set(requested.split(separator: " ")).isSubset(of: Set(registered.split(separator: " "))) else {
                    throw OAuthError("invalid_scope", "the requested scope is not registered for the client")
                }
            }
            scope = requested
        }
        let now = handler.configuration.clock().timeIntervalSince1970
        let userCode = try OAuthRoutes.newUserCode()
        let row = OAuthDeviceCodeRow(
            deviceCode: try randomToken(bytes: 32), userCode: userCode, clientId: client.clientId, scope: scope,
            expiresAt: now + configuration.deviceCodeLifetime, interval: configuration.deviceCodeInterval,
            lastPoll: nil, status: "pending", subject: nil, jkt: nil)
        try await store.insert(row)
        let display = OAuthRoutes.displayUserCode(userCode)
        let verification = await endpoint(OAuthPath.deviceVerification)
        var members: [String: JSONValue] = [
            "device_code": .string(row.deviceCode), "user_code": .string(display),
            "verification_uri": .string(verification), "expires_in": .int(Int64(configuration.deviceCodeLifetime)),
        ]
        if !configuration.omitsOptionalDeviceMembers {
            members["verification_uri_complete"] = .string(verification + "?user_code=" + display)
            members["interval"] = .int(Int64(configuration.deviceCodeInterval))
        }
        return jsonResponse(.object(members))
    }

    /// RFC 8628 §6.1's example alphabet: no vowels, no look-alikes; 8 characters (~34 bits).
    static let userCodeAlphabet = Array("BCDFGHJKLMNPQRSTVWXZ")

    static func newUserCode() throws -> String {
        var code = ""
        while code.count < 8 {
            for byte in try randomBytes(16) where byte < 240 && code.count < 8 {
                code.append(userCodeAlphabet[Int(byte) % userCodeAlphabet.count])
            }
        }
        return code
    }

    static func displayUserCode(_ code: String) -> String {
        String(code.prefix(4)) + "-" + String(code.dropFirst(4))
    }

    /// What a person types, normalized: upper case, separators dropped.
    static func normalizedUserCode(_ typed: String) -> String {
        typed.uppercased().filter { $0.isLetter || $0.isNumber }
    }

    // MARK: resource

    private func userinfo(_ request: IncomingRequest, _ faults: OAuthFaultSet) async throws -> Response {
        let challengeDPoP = #"DPoP algs="ES256""#
        guard let authorization = request.headers[.authorization] else {
            throw OAuthError(status: 401, "invalid_token", "An access token is required", wwwAuthenticate: challengeDPoP)
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, ["dpop", "bearer"].contains(parts[0].lowercased()) else {
            throw OAuthError(status: 401, "invalid_token", "Unsupported authorization scheme", wwwAuthenticate: challengeDPoP)
        }
        let scheme = parts[0].lowercased()
        let accessToken = String(parts[1]).trimmingCharacters(in: .whitespaces)
        func invalid(_ error: String, _ description: String) -> OAuthError {
            let name = scheme == "dpop" ? "DPoP" : "Bearer"
            return OAuthError(
                status: 401, error, description,
                wwwAuthenticate: "\(name) error=\"\(error)\", error_description=\"\(description)\"")
        }
        let now = handler.configuration.clock()
        guard let row = try await store.token(accessToken), row.kind == "access", row.status == "active",
            row.expiresAt > now.timeIntervalSince1970, let client = try await store.client(row.clientId),
            client.status == "active"
        else { throw invalid("invalid_token", "The access token is not valid") }
        try await store.countPresentation(of: accessToken)
        var headers = HTTPHeaders()
        if let bound = row.jkt {
            guard scheme == "dpop" else { throw invalid("invalid_token", "A DPoP-bound token must be sent as DPoP") }
            let proof: DPoPProof
            do {
                proof = try await dpopVerifier(now: now).verify(
                    headerValues: request.headers.values(named: "DPoP"), method: request.method.rawValue,
                    url: await requestURL(request), accessToken: accessToken,
                    nonceIssuer: configuration.resourceRequiresDPoPNonce ? .resourceServer : nil)
            } catch let error as OAuthError {
                var mapped = invalid(
                    error.error == "use_dpop_nonce" ? "use_dpop_nonce" : "invalid_dpop_proof",
                    error.error == "use_dpop_nonce" ? "Resource server requires nonce in DPoP proof" : error.description)
                mapped.dpopNonce = error.dpopNonce
                throw mapped
            }
            guard proof.jkt == bound else { throw invalid("invalid_dpop_proof", "The proof key is not the token's key") }
            if configuration.resourceRequiresDPoPNonce {
                headers.set(
                    "DPoP-Nonce",
                    try await state.nonce(.resourceServer, now: now, lifetime: configuration.dpopNonceLifetime))
            }
        } else if scheme == "dpop" {
            throw invalid("invalid_token", "The access token is not DPoP-bound")
        }
        return jsonResponse(
            .object([
                "sub": .string(row.subject), "client_id": .string(row.clientId), "scope": .string(row.scope),
            ]), headers: headers)
    }

    // MARK: request parsing

    /// The `Authorization: Bearer` token, if any.
    static func bearerToken(_ request: IncomingRequest) -> String? {
        guard let authorization = request.headers[.authorization] else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = String(parts[1]).trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    /// A JSON object body, labelled `application/json`.
    static func jsonObjectBody(_ request: IncomingRequest) throws -> [String: JSONValue] {
        guard mediaType(request) == "application/json" else {
            throw OAuthError.invalidClientMetadata("the body must be application/json")
        }
        guard let body = try? JSONValue.parse(request.body), let object = body.objectValue else {
            throw OAuthError.invalidClientMetadata("the body must be a JSON object")
        }
        return object
    }

    /// An `application/x-www-form-urlencoded` body; a parameter sent twice is refused (RFC 6749 §3.2).
    static func form(_ request: IncomingRequest) throws -> [String: String] {
        guard mediaType(request) == "application/x-www-form-urlencoded" else {
            throw OAuthError.invalidRequest("the body must be application/x-www-form-urlencoded")
        }
        var parameters: [String: String] = [:]
        for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") where !pair.isEmpty {
            let nameValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = RawTarget.percentDecode(String(nameValue[0]), plusIsSpace: true),
                let value = RawTarget.percentDecode(nameValue.count > 1 ? String(nameValue[1]) : "", plusIsSpace: true)
            else { throw OAuthError.invalidRequest("the form body is not valid percent-encoded UTF-8") }
            guard parameters[name] == nil else { throw OAuthError.invalidRequest("parameter \(name) is repeated") }
            parameters[name] = value
        }
        return parameters
    }

    private static func mediaType(_ request: IncomingRequest) -> String {
        (request.headers[.contentType] ?? "").split(separator: ";").first
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
    }
}

/// The authorization server's parts a request handler carries.
struct OAuthContext: Sendable {
    let store: OAuthStore
    let state: OAuthState
}
