import Foundation

/// Why the reference server could not start or do what was asked.
public struct ReferenceServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for a person.
    public let message: String

    /// Creates an error with a message.
    public init(_ message: String) { self.message = message }

    public var description: String { message }
}

/// A local stand-in for PingAM: its bound-device REST and its device binding / signing journeys,
/// over loopback HTTP, with state in its own SQLite file.
///
/// ```swift
/// let server = try await ReferenceServer.start(
///     configuration: .init(databasePath: path, adminToken: "secret"))
/// try await server.addUser("demo", password: "Ch4ngeit")
/// // … talk to server.baseURL …
/// await server.stop()
/// ```
public final class ReferenceServer: Sendable {
    /// `http://127.0.0.1:<port>`, with the port actually bound.
    public let baseURL: URL
    /// The configuration the server runs with.
    public let configuration: ReferenceServerConfiguration

    let handler: RequestHandler
    let tenants: Tenants
    private let http: HTTPServer

    private init(
        baseURL: URL, configuration: ReferenceServerConfiguration, handler: RequestHandler, tenants: Tenants,
        http: HTTPServer
    ) {
        self.baseURL = baseURL
        self.configuration = configuration
        self.handler = handler
        self.tenants = tenants
        self.http = http
    }

    /// Opens (or creates) the database, binds 127.0.0.1 on the configured port and returns once the
    /// server accepts connections.
    public static func start(configuration: ReferenceServerConfiguration) async throws -> ReferenceServer {
        try await start(configuration: configuration, verifier: defaultJWSVerifier())
    }

    static func start(
        configuration: ReferenceServerConfiguration, verifier: any JWSVerifier
    ) async throws -> ReferenceServer {
        guard (0...65_535).contains(configuration.port) else {
            throw ReferenceServerError("port \(configuration.port) is not in 0...65535")
        }
        guard !configuration.adminToken.isEmpty else { throw ReferenceServerError("the admin token is empty") }
        let store: Store
        do {
            store = try Store(path: configuration.databasePath)
        } catch {
            throw ReferenceServerError("cannot open \(configuration.databasePath): \(error)")
        }
        let handler = try RequestHandler.make(configuration: configuration, verifier: verifier, store: store)
        let tenants = Tenants(root: handler, verifier: verifier)
        let oauth = handler.oauth

        // The server's `Date` header says its clock's time when it runs with `--clock-offset`, as a server whose clock
        // differs from the client's does, so that clients that learn the server's time from `Date` can.
        let machineTime: @Sendable () -> Date = { Date() }
        let settings = HTTPServer.Settings(
            maxRequestBodySize: configuration.maxRequestBodySize,
            bodyTooLarge: AMError(status: 413, message: "The request body is larger than the server accepts").response,
            clock: configuration.dateHeaderFollowsClock ? configuration.clock : machineTime)
        let http = try HTTPServer.start(port: configuration.port, settings: settings) { request in
            await tenants.respond(to: request)
        }
        guard let baseURL = URL(string: "http://127.0.0.1:\(http.port)") else {
            await http.stop()
            throw ReferenceServerError("cannot form the base URL for port \(http.port)")
        }
        await oauth.state.setBaseURL(baseURL.absoluteString)
        await tenants.setBaseURL(baseURL.absoluteString)
        return ReferenceServer(
            baseURL: baseURL, configuration: configuration, handler: handler, tenants: tenants, http: http)
    }

    /// Stops listening, closes every connection and waits until the server has shut down. Calling it twice is
    /// harmless.
    public func stop() async {
        await http.stop()
    }

    // MARK: URLs

    /// `{base}/json{realm}/users/{user}/devices/2fa/binding`, the user percent-encoded as one segment.
    public func deviceCollectionURL(user: String, realmPath: String? = nil) -> URL {
        url("/json\(realmPath ?? handler.realms[0].path)/users/\(PathEncoding.segment(user))/devices/2fa/binding")
    }

    /// `{base}/json{realm}/authenticate?authIndexType=service&authIndexValue=<journey>`.
    public func authenticateURL(journey: String, realmPath: String? = nil) -> URL {
        url(
            "/json\(realmPath ?? handler.realms[0].path)/authenticate?authIndexType=service&authIndexValue="
                + PathEncoding.segment(journey))
    }

    /// The universal id PingAM gives `username` (`id=demo,ou=user,ou=am-config` in the root realm,
    /// `id=demo,ou=user,o=alpha,ou=services,ou=am-config` in `/realms/root/realms/alpha`): the
    /// `userId` of the device callbacks and the `sub` a JWS must carry.
    public func universalId(of username: String, realmPath: String? = nil) -> String? {
        let path = realmPath ?? handler.realms[0].path
        return handler.realms.first { $0.path == path }?.universalId(of: username)
    }

    private func url(_ pathAndQuery: String) -> URL {
        // The inputs are percent-encoded above, so the string is always a valid URL.
        URL(string: baseURL.absoluteString + pathAndQuery) ?? baseURL
    }

    // MARK: users

    /// Adds a user (or changes its password) in `realmPath` (default: the first configured realm).
    public func addUser(_ username: String, password: String, realmPath: String? = nil) async throws {
        guard !username.isEmpty else { throw ReferenceServerError("the username is empty") }
        try await handler.store.upsertUser(realm: try realm(realmPath).path, username: username, password: password)
    }

    /// Every user, by realm and name.
    public func users() async throws -> [ReferenceUser] {
        try await handler.store.users()
    }

    // MARK: devices

    /// Every device record, in creation order.
    public func devices() async throws -> [BoundDevice] {
        try await handler.store.allDevices()
    }

    /// The records of `user` in `realmPath` (default: the first configured realm), in creation order.
    public func devices(user: String, realmPath: String? = nil) async throws -> [BoundDevice] {
        try await handler.store.page(realm: try realm(realmPath).path, user: user, after: nil, limit: nil).devices
    }

    /// Stores a record as if a binding journey had created it (e.g. another device's key, or an orphan).
    public func addDevice(_ device: BoundDevice) async throws {
        _ = try realm(device.realmPath)
        guard device.key["kid"] == device.uuid else { throw ReferenceServerError("key.kid must equal uuid") }
        guard try await handler.store.insert(device) else {
            throw ReferenceServerError("a device with uuid \(device.uuid) exists")
        }
    }

    /// Deletes a record as an administrator would; returns it, or nil when there was none.
    @discardableResult
    public func deleteDevice(uuid: String) async throws -> BoundDevice? {
        try await handler.store.delete(realm: nil, user: nil, uuid: uuid)
    }

    // MARK: faults

    /// Makes the device REST misbehave for `user` (the `{user}` path segment), on the next `count`
    /// requests or, with nil, until cleared. One fault per user; a new one replaces the old.
    public func setFault(_ fault: Fault, forUser user: String, count: Int? = nil) async {
        await handler.state.setFault(fault, user: user, count: count.map { max(1, $0) })
    }

    /// Clears the fault of `user`.
    public func clearFault(forUser user: String) async {
        await handler.state.clearFault(user: user)
    }

    /// Clears every fault.
    public func clearFaults() async {
        await handler.state.clearFaults()
    }

    /// The armed faults, by user.
    public func faults() async -> [String: Fault] {
        await handler.state.currentFaults()
    }

    // MARK: journeys

    /// How many sessions successful journeys opened that nobody has logged out.
    public func openSessionCount() async -> Int {
        await handler.state.openSessionCount()
    }

    /// The `clientError` answers device callbacks got, oldest first.
    public func clientErrors() async -> [JourneyClientError] {
        await handler.state.recordedClientErrors()
    }

    // MARK: journal

    /// The last 1000 PingAM requests (admin requests excluded), oldest first.
    public func recordedRequests() async -> [RecordedRequest] {
        await handler.state.recordedRequests()
    }

    /// Forgets the recorded requests.
    public func clearRecordedRequests() async {
        await handler.state.clearRecordedRequests()
    }

    /// When the server last received a request (by its clock); the start time before any.
    public func lastActivity() async -> Date {
        await handler.state.lastActivity
    }

    private func realm(_ path: String?) throws -> Realm {
        guard let path else { return handler.realms[0] }
        guard let realm = handler.realms.first(where: { $0.path == path }) else {
            throw ReferenceServerError("realm \(path) is not served")
        }
        return realm
    }
}

/// The JWS verifier used by `start(configuration:)`.
func defaultJWSVerifier() -> any JWSVerifier {
    ServerJWSVerifier()
}
