import Foundation
import KeymgrCore

/// A user a tenant starts with.
public struct TenantUser: Sendable, Equatable {
    /// The user's name (in the tenant's first realm).
    public var username: String
    /// The user's password.
    public var password: String

    /// Creates a user.
    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }
}

/// What a tenant runs with: its own configuration (journeys, realms, OAuth settings…) and its first users.
///
/// The server's process-wide settings (port, admin token, logger, the `Date` header's clock, the database file) are
/// the server's, whatever the tenant's configuration says.
public struct TenantSettings: Sendable {
    /// The tenant's configuration.
    public var configuration: ReferenceServerConfiguration
    /// The users it starts with.
    public var users: [TenantUser]

    /// Creates tenant settings.
    public init(configuration: ReferenceServerConfiguration, users: [TenantUser] = []) {
        self.configuration = configuration
        self.users = users
    }
}

/// Makes a tenant's settings from arguments (the executable's command-line options, e.g. `--auth-type`,
/// `--add-user`); an error's description says what was wrong. Called with `[]` for a tenant created on first use.
public typealias TenantConfigurator = @Sendable (_ arguments: [String]) throws -> TenantSettings

/// The server's tenants: every route it serves, again under `/t/<id>/…`, each tenant with its own users, devices,
/// clients, tokens, faults, delays and journal (an in-memory database and state of its own). A tenant is created on
/// first use (with the server's own settings) or by `PUT /__refserver/tenants/<id>` (with arguments of its own).
actor Tenants {
    /// Up to 64 letters, digits, `-` and `_`.
    static func isValid(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.unicodeScalars.allSatisfy { ($0.isASCII && CharacterSet.alphanumerics.contains($0)) || $0 == "-" || $0 == "_" }
    }

    /// The server's own routes (no `/t/` prefix).
    let root: RequestHandler
    private let verifier: any JWSVerifier
    private var rootBaseURL = ""
    private var handlers: [String: RequestHandler] = [:]

    init(root: RequestHandler, verifier: any JWSVerifier) {
        self.root = root
        self.verifier = verifier
    }

    func setBaseURL(_ url: String) { rootBaseURL = url }

    /// `{server}/t/<id>`: the tenant's base URL, what its issuer, endpoints and DPoP `htu` start with.
    func baseURL(of id: String) -> String { rootBaseURL + "/t/" + id }

    var ids: [String] { handlers.keys.sorted() }

    /// The tenant's handler, created with the server's own settings when it does not exist yet.
    func handler(for id: String) async throws -> RequestHandler {
        if let handler = handlers[id] { return handler }
        return try await create(id, arguments: [])
    }

    /// Creates a tenant; throws when it exists or its arguments are refused.
    @discardableResult
    func create(_ id: String, arguments: [String]) async throws -> RequestHandler {
        guard Self.isValid(id) else {
            throw AMError.badRequest("a tenant id is 1 to 64 letters, digits, - or _")
        }
        guard handlers[id] == nil else { throw AMError(status: 409, message: "Tenant \(id) exists") }
        var settings: TenantSettings
        if let configurator = root.configuration.tenantConfigurator {
            do {
                settings = try configurator(arguments)
            } catch {
                throw AMError.badRequest("the tenant's arguments are refused: \(error)")
            }
        } else {
            guard arguments.isEmpty else {
                throw AMError.badRequest("this server takes no tenant arguments (it was started without a tenant configurator)")
            }
            settings = TenantSettings(configuration: root.configuration)
        }
        // The process-wide settings stay the server's.
        settings.configuration.adminToken = root.configuration.adminToken
        settings.configuration.logger = root.configuration.logger
        settings.configuration.port = root.configuration.port
        settings.configuration.databasePath = ":memory:"
        settings.configuration.dateHeaderFollowsClock = root.configuration.dateHeaderFollowsClock
        if root.configuration.dateHeaderFollowsClock { settings.configuration.clock = root.configuration.clock }
        settings.configuration.tenantConfigurator = nil
        let handler: RequestHandler
        do {
            handler = try RequestHandler.make(configuration: settings.configuration, verifier: verifier, store: try Store(inMemory: ()))
        } catch let error as ReferenceServerError {
            throw AMError.badRequest("the tenant's settings are refused: \(error.message)")
        }
        guard let firstRealm = handler.realms.first else { throw AMError.badRequest("the tenant has no realm") }
        for user in settings.users {
            try await handler.store.upsertUser(realm: firstRealm.path, username: user.username, password: user.password)
        }
        await handler.oauth.state.setBaseURL(baseURL(of: id))
        handlers[id] = handler
        return handler
    }
}

extension Tenants {
    /// Routes a request: `/t/<id>/…` to that tenant (created on first use), `/__refserver/tenants[/<id>]` to the
    /// tenants' control, anything else to the server's own routes.
    nonisolated func respond(to request: Request) async -> Response {
        let rawTarget = request.target
        let split = TenantTarget(rawTarget)
        do {
            guard let id = split.tenant else {
                if let segments = RawTarget(rawTarget)?.segments, segments.count >= 2, segments[0] == "__refserver",
                    segments[1] == "tenants"
                {
                    return try await control(request, rawTarget: rawTarget, path: Array(segments.dropFirst(2)))
                }
                return await root.respond(to: request, rawTarget: rawTarget)
            }
            await root.state.touch()
            let handler = try await handler(for: id)
            return await handler.respond(to: request, rawTarget: split.target)
        } catch let error as AMError {
            return error.response
        } catch {
            root.configuration.logger.error("tenant request failed: \(String(describing: error))")
            return AMError.internalError("Internal Server Error").response
        }
    }

    /// `GET /__refserver/tenants` (the ids and base URLs) and `PUT /__refserver/tenants/<id>` with
    /// `{"arguments": [...]}` (201 with the tenant's `baseURL`; 409 when it exists), behind the admin credential.
    private nonisolated func control(_ request: Request, rawTarget: String, path: [String]) async throws -> Response {
        await root.state.touch()
        guard let target = RawTarget(rawTarget) else { throw AMError.badRequest("The request path is not valid") }
        let incoming = IncomingRequest(
            method: request.method, rawTarget: rawTarget, target: target, headers: request.headers, body: request.body)
        try root.authorize(incoming)
        switch (request.method, path.count) {
        case (.get, 0):
            var result: [JSONValue] = []
            for id in await ids { result.append(.object(["id": .string(id), "baseURL": .string(await baseURL(of: id))])) }
            return jsonResponse(.object(["result": .array(result)]))
        case (.put, 1):
            var arguments: [String] = []
            if !incoming.body.isEmpty {
                let body = try incoming.jsonBody()
                if let list = body["arguments"] {
                    guard let values = list.arrayValue?.compactMap(\.stringValue), values.count == list.arrayValue?.count
                    else { throw AMError.badRequest("arguments must be an array of strings") }
                    arguments = values
                }
            }
            try await create(path[0], arguments: arguments)
            return jsonResponse(
                .object(["id": .string(path[0]), "baseURL": .string(await baseURL(of: path[0]))]), status: 201)
        default:
            throw AMError.notFound("Resource '\(rawTarget)' not found")
        }
    }
}

/// A request target split into its tenant (`/t/<id>`) and the rest, the target the tenant's routes see.
struct TenantTarget: Equatable, Sendable {
    var tenant: String?
    var target: String

    init(tenant: String?, target: String) {
        self.tenant = tenant
        self.target = target
    }

    /// `/t/abc/json/x?y` → (`abc`, `/json/x?y`); `/t/abc?y` → (`abc`, `/?y`); a discovery document of an issuer
    /// below the tenant, its well-known part inserted before the issuer's path (RFC 8414 §3.1):
    /// `/.well-known/oauth-authorization-server/t/abc/oauth/x` → (`abc`, `/.well-known/oauth-authorization-server/oauth/x`);
    /// anything else → (nil, itself).
    init(_ rawTarget: String) {
        for document in ["/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"]
        where rawTarget.hasPrefix(document + "/t/") {
            let inner = TenantTarget(String(rawTarget.dropFirst(document.count)))
            tenant = inner.tenant
            target = inner.target == "/" ? document : document + inner.target
            return
        }
        guard rawTarget.hasPrefix("/t/") else {
            tenant = nil
            target = rawTarget
            return
        }
        let rest = rawTarget.dropFirst(3)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        tenant = String(rest[rest.startIndex..<end])
        let remainder = String(rest[end...])
        target = remainder.hasPrefix("/") ? remainder : "/" + remainder
    }
}
