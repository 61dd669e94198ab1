import Foundation
import KeymgrCore

/// One request, read in full: what every route handler works from.
struct IncomingRequest: Sendable {
    var method: HTTPMethod
    var rawTarget: String
    var target: RawTarget
    var headers: HTTPHeaders
    var body: [UInt8]

    /// The body as JSON; PingAM's Common REST message when it is not.
    func jsonBody() throws -> JSONValue {
        do {
            return try JSONValue.parse(body)
        } catch {
            throw AMError.badRequest("The request could not be processed because the provided content is not valid JSON")
        }
    }
}

/// Dispatches requests on the RAW path (a router that decodes first would split `%2F`), so a
/// user id containing `/`, `?`, `#` or spaces arrives intact as one segment.
struct RequestHandler: Sendable {
    let configuration: ReferenceServerConfiguration
    let realms: [Realm]
    let store: Store
    let state: ServerState
    let verifier: any JWSVerifier
    let oauth: OAuthContext

    /// A handler with its own state for `configuration` (the server's, or a tenant's) over `store`.
    static func make(configuration: ReferenceServerConfiguration, verifier: any JWSVerifier, store: Store) throws -> RequestHandler {
        guard !configuration.realmPaths.isEmpty else { throw ReferenceServerError("no realm configured") }
        var realms: [Realm] = []
        for path in configuration.realmPaths {
            guard let realm = Realm(path: path) else {
                throw ReferenceServerError("realm path \(path) is not of the form /realms/root[/realms/name…]")
            }
            if !realms.contains(realm) { realms.append(realm) }
        }
        let names = configuration.journeys.map(\.name)
        guard Set(names).count == names.count else { throw ReferenceServerError("journey names must be unique") }
        let oauth: OAuthContext
        do {
            oauth = OAuthContext(store: try OAuthStore(database: store.database), state: OAuthState())
        } catch {
            throw ReferenceServerError("cannot prepare the OAuth tables in \(configuration.databasePath): \(error)")
        }
        return RequestHandler(
            configuration: configuration, realms: realms, store: store, state: ServerState(), verifier: verifier,
            oauth: oauth)
    }

    /// Answers `request`, whose target is `rawTarget` (a tenant's: without its `/t/<id>` prefix).
    func respond(to request: Request, rawTarget: String? = nil) async -> Response {
        let rawTarget = rawTarget ?? request.target
        let isAdmin = RawTarget(rawTarget)?.segments.first == "__refserver"
        let number = isAdmin ? nil : await state.record(recorded(request, rawTarget), at: configuration.clock())
        let response = await answer(request, rawTarget: rawTarget)
        if let number { await state.answered(number) }
        return response
    }

    private func answer(_ request: Request, rawTarget: String) async -> Response {
        do {
            guard let target = RawTarget(rawTarget) else {
                throw AMError.badRequest("The request path is not valid percent-encoded UTF-8")
            }
            let isAdmin = target.segments.first == "__refserver"
            let incoming = IncomingRequest(
                method: request.method, rawTarget: rawTarget, target: target, headers: request.headers,
                body: request.body)
            if isAdmin {
                return try await AdminRoutes(handler: self).respond(to: incoming)
            }
            if let response = await OAuthRoutes(handler: self).respond(to: incoming) { return response }
            guard target.segments.first == "json" else {
                throw AMError.notFound("Resource '\(rawTarget)' not found")
            }
            return try await respondAM(to: incoming)
        } catch let error as AMError {
            return error.response
        } catch is CancellationError {
            // The server is stopping; the answer goes nowhere.
            return AMError(status: 503, message: "Service Unavailable").response
        } catch {
            configuration.logger.error("request failed: \(String(describing: error))")
            return AMError.internalError("Internal Server Error").response
        }
    }

    /// `/json{realm}/authenticate`, `/json{realm}/sessions?_action=logout` and `/json{realm}/users/{user}/devices/2fa/binding[/{uuid}]`.
    private func respondAM(to request: IncomingRequest) async throws -> Response {
        var rest = ArraySlice(request.target.segments.dropFirst())
        var realmSegments: [String] = []
        while rest.count >= 2, rest.first == "realms" {
            realmSegments.append(contentsOf: rest.prefix(2))
            rest = rest.dropFirst(2)
        }
        let realmPath = realmSegments.isEmpty ? "/realms/root" : "/" + realmSegments.joined(separator: "/")
        guard let realm = realms.first(where: { $0.path == realmPath }) else {
            throw AMError.notFound("Realm \(realmPath) not found")
        }
        let resource = Array(rest)
        if resource == ["authenticate"] {
            guard request.method == .post else { throw AMError(status: 405, message: "Method Not Allowed") }
            return try await JourneyRoutes(handler: self, realm: realm).respond(to: request)
        }
        if resource == ["sessions"] {
            guard request.method == .post else { throw AMError(status: 405, message: "Method Not Allowed") }
            return try await JourneyRoutes(handler: self, realm: realm).logout(request)
        }
        if resource.count >= 5, resource[0] == "users", resource[2] == "devices", resource[3] == "2fa",
            resource[4] == "binding", resource.count <= 6
        {
            try authorize(request)
            return try await DeviceRoutes(handler: self, realm: realm, user: resource[1])
                .respond(to: request, uuid: resource.count == 6 ? resource[5] : nil)
        }
        throw AMError.notFound("Resource '\(request.target.segments.joined(separator: "/"))' not found")
    }

    /// Checks the admin credential: `Authorization: Bearer <token>` or `iPlanetDirectoryPro: <token>`.
    func authorize(_ request: IncomingRequest) throws {
        var presented: [String] = []
        if let authorization = request.headers[.authorization] {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" {
                presented.append(String(parts[1]).trimmingCharacters(in: .whitespaces))
            }
        }
        if let session = request.headers.value(named: "iPlanetDirectoryPro") {
            presented.append(session)
        }
        guard presented.contains(where: { constantTimeEqual($0, configuration.adminToken) }) else {
            throw AMError.accessDenied
        }
    }

    private func recorded(_ request: Request, _ rawTarget: String) -> RecordedRequest {
        var headers: [String: String] = [:]
        for field in request.headers {
            let name = field.name.canonicalName
            let redacted = name == "authorization" || name == "iplanetdirectorypro"
            let value = redacted ? "[redacted]" : field.value
            headers[name] = headers[name].map { "\($0), \(value)" } ?? value
        }
        return RecordedRequest(method: request.method.rawValue, target: rawTarget, headers: headers, received: Date())
    }
}

/// Compares two strings without an early exit on the first difference.
func constantTimeEqual(_ lhs: String, _ rhs: String) -> Bool {
    let left = Array(lhs.utf8)
    let right = Array(rhs.utf8)
    guard left.count == right.count else { return false }
    var difference: UInt8 = 0
    for index in left.indices { difference |= left[index] ^ right[index] }
    return difference == 0
}
