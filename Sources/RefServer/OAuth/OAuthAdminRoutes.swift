import Foundation
import KeymgrCore

/// `/__refserver/oauth/…`: what an administrator of the authorization server (or a test) does and
/// sees. Documented with the endpoints in `OAuthRoutes`.
struct OAuthAdminRoutes: Sendable {
    let handler: RequestHandler

    private var admin: OAuthAdministration { OAuthAdministration(handler: handler) }

    func respond(to request: IncomingRequest, path: [String]) async throws -> Response {
        switch (request.method, path.first, path.count) {
        case (.get, "clients", 1):
            let clients = try await admin.clients()
            return jsonResponse(.object(["result": .array(clients.map(\.json))]))
        case (.delete, "clients", 2):
            guard try await handler.oauth.store.deleteClient(path[1]) else {
                throw AMError.notFound("Client \(path[1]) not found")
            }
            return Response(status: .noContent)
        case (.post, "clients", 3) where path[2] == "revoke":
            guard try await handler.oauth.store.revokeClient(path[1]) else {
                throw AMError.notFound("Client \(path[1]) not found")
            }
            return jsonResponse(.object(["client_id": .string(path[1]), "status": "revoked"]))
        case (.get, "tokens", 1):
            let tokens = try await admin.tokens()
            return jsonResponse(.object(["result": .array(tokens.map(\.json))]))
        case (.post, "tokens", 1):
            let body = try request.jsonBody()
            guard let clientId = body["client_id"]?.stringValue, let subject = body["subject"]?.stringValue,
                !subject.isEmpty
            else { throw AMError.badRequest("client_id and subject are required") }
            let response = try await admin.mintTokens(
                clientId: clientId, subject: subject, scope: body["scope"]?.stringValue, jkt: body["jkt"]?.stringValue)
            return jsonResponse(response, status: 201)
        case (.get, "device", 1):
            let codes = try await handler.oauth.store.deviceCodes()
            return jsonResponse(
                .object([
                    "result": .array(
                        codes.map {
                            .object([
                                "user_code": .string(OAuthRoutes.displayUserCode($0.userCode)),
                                "client_id": .string($0.clientId), "status": .string($0.status),
                                "interval": .int(Int64($0.interval)), "scope": .string($0.scope),
                                "subject": $0.subject.map { .string($0) } ?? .null,
                            ])
                        })
                ]))
        case (.post, "device", 2):
            let body = try request.jsonBody()
            guard let userCode = body["user_code"]?.stringValue else { throw AMError.badRequest("user_code is required") }
            let decision: DeviceDecision
            switch path[1] {
            case "approve":
                guard let subject = body["subject"]?.stringValue, !subject.isEmpty else {
                    throw AMError.badRequest("subject is required")
                }
                decision = .approve(subject: subject)
            case "deny": decision = .deny
            case "expire": decision = .expire
            default: throw AMError.notFound("Resource '/__refserver/oauth/device/\(path[1])' not found")
            }
            guard let status = try await admin.decide(userCode: userCode, decision) else {
                throw AMError.notFound("No device authorization with user code \(userCode)")
            }
            return jsonResponse(.object(["user_code": .string(userCode), "status": .string(status)]))
        case (.post, "nonces", 2) where path[1] == "rotate":
            let now = handler.configuration.clock()
            let authorizationServer = try await handler.oauth.state.rotateNonce(.authorizationServer, now: now)
            let resourceServer = try await handler.oauth.state.rotateNonce(.resourceServer, now: now)
            return jsonResponse(
                .object([
                    "authorization_server": .string(authorizationServer), "resource_server": .string(resourceServer),
                ]))
        case (.get, "faults", 1):
            let faults = await handler.oauth.state.currentFaults()
            var members: [String: JSONValue] = [:]
            for (endpoint, list) in faults { members[endpoint.rawValue] = .array(list.map(\.json)) }
            return jsonResponse(.object(["faults": .object(members)]))
        case (.put, "faults", 2):
            guard let endpoint = OAuthEndpoint(rawValue: path[1]) else {
                throw AMError.badRequest(
                    "endpoint must be one of \(OAuthEndpoint.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let body = try request.jsonBody()
            guard let fault = OAuthFault(json: body) else {
                throw AMError.badRequest("fault must be one of \(OAuthFault.names)")
            }
            let count = body["count"]?.intValue
            if let count, count < 1 { throw AMError.badRequest("count must be at least 1") }
            await handler.oauth.state.setFault(fault, endpoint: endpoint, count: count.map { Int($0) })
            return jsonResponse(fault.json)
        case (.delete, "faults", 1), (.delete, "faults", 2):
            let endpoint = path.count == 2 ? OAuthEndpoint(rawValue: path[1]) : nil
            if path.count == 2, endpoint == nil { throw AMError.notFound("No endpoint \(path[1])") }
            await handler.oauth.state.clearFaults(endpoint: endpoint)
            return Response(status: .noContent)
        default:
            throw AMError.notFound("Resource '/\(request.target.segments.joined(separator: "/"))' not found")
        }
    }
}

/// What an administrator decides about a device authorization request.
enum DeviceDecision: Sendable {
    case approve(subject: String)
    case deny
    case expire
}

/// The administrator's operations, shared by the admin HTTP surface and the Swift API.
struct OAuthAdministration: Sendable {
    let handler: RequestHandler

    func clients() async throws -> [OAuthClientInfo] {
        try await handler.oauth.store.clients().map(OAuthClientInfo.init)
    }

    func tokens() async throws -> [OAuthTokenInfo] {
        try await handler.oauth.store.tokens().map(OAuthTokenInfo.init)
    }

    /// Issues a token set for the client as if `subject` had just logged in; the token response JSON.
    func mintTokens(clientId: String, subject: String, scope: String?, jkt: String?) async throws -> JSONValue {
        guard let client = try await handler.oauth.store.client(clientId), client.status == "active" else {
            throw AMError.notFound("Client \(clientId) not found")
        }
        let tokens = try OAuthRoutes.makeTokens(
            clientId: clientId, subject: subject, scope: scope ?? client.metadata["scope"]?.stringValue ?? "",
            accessJKT: jkt, refreshJKT: jkt, grantId: try randomToken(bytes: 16),
            withRefresh: client.grantTypes.contains(GrantType.refreshToken), now: handler.configuration.clock(),
            configuration: handler.configuration.oauth)
        try await handler.oauth.store.insert(tokens)
        return OAuthRoutes.tokenResponseJSON(tokens)
    }

    /// Applies the decision to the request with this user code; its new status, or nil when none.
    func decide(userCode: String, _ decision: DeviceDecision) async throws -> String? {
        let now = handler.configuration.clock().timeIntervalSince1970
        let row = try await handler.oauth.store.updateDeviceCode(userCode: OAuthRoutes.normalizedUserCode(userCode)) {
            row in
            switch decision {
            case .approve(let subject):
                if row.status == "pending" {
                    row.status = "approved"
                    row.subject = subject
                }
            case .deny:
                if row.status == "pending" { row.status = "denied" }
            case .expire:
                row.expiresAt = min(row.expiresAt, now)
            }
        }
        return row?.status
    }
}

/// A registered client as the administrator sees it.
public struct OAuthClientInfo: Sendable, Equatable {
    /// The client id.
    public var clientId: String
    /// The current client secret (nil for a public client).
    public var clientSecret: String?
    /// The current registration access token.
    public var registrationAccessToken: String
    /// The metadata, extension members included.
    public var metadata: [String: JSONValue]
    /// The template (`software_id`) it was made from, if any.
    public var template: String?
    /// `active` or `revoked`.
    public var status: String

    init(_ row: OAuthClientRow) {
        clientId = row.clientId
        clientSecret = row.clientSecret
        registrationAccessToken = row.registrationToken
        metadata = row.metadata
        template = row.template
        status = row.status
    }

    var json: JSONValue {
        .object([
            "client_id": .string(clientId), "client_secret": clientSecret.map { .string($0) } ?? .null,
            "registration_access_token": .string(registrationAccessToken), "metadata": .object(metadata),
            "template": template.map { .string($0) } ?? .null, "status": .string(status),
        ])
    }
}

/// An issued token as the administrator sees it.
public struct OAuthTokenInfo: Sendable, Equatable {
    /// The token itself.
    public var token: String
    /// `access` or `refresh`.
    public var kind: String
    /// The client it was issued to.
    public var clientId: String
    /// The user it was issued for.
    public var subject: String
    /// The granted scope.
    public var scope: String
    /// `cnf.jkt`: the thumbprint of the DPoP key it is bound to; nil for a Bearer token.
    public var jkt: String?
    /// `active`, `used` (a spent refresh token) or `revoked`.
    public var status: String
    /// How many times it was presented (a refresh token at the token endpoint, an access token at the resource).
    public var presentations: Int
    /// Shared by the tokens of one grant (a login and its refreshes).
    public var grantId: String

    init(_ row: OAuthTokenRow) {
        token = row.token
        kind = row.kind
        clientId = row.clientId
        subject = row.subject
        scope = row.scope
        jkt = row.jkt
        status = row.status
        presentations = row.presentations
        grantId = row.grantId
    }

    var json: JSONValue {
        .object([
            "token": .string(token), "kind": .string(kind), "client_id": .string(clientId),
            "subject": .string(subject), "scope": .string(scope), "jkt": jkt.map { .string($0) } ?? .null,
            "status": .string(status), "presentations": .int(Int64(presentations)), "grant_id": .string(grantId),
        ])
    }
}
