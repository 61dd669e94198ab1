import Foundation
import KeyManager
import Logging
import ServerClients

/// What reading a registration at the server found.
public enum RegistrationCheck: Sendable, Equatable {
    /// The client exists; rotated credentials (if any) are stored.
    case current(Registration)
    /// The server answered 401: the client was revoked or deleted there, and is wiped here (sync rule 5).
    case wiped
}

extension RegistrationService {
    /// What to say when the server refuses a registration access token with 400 `access_denied` or 403.
    static func refusalMessage(userId: String, clientId: String, status: Int, error: String?) -> String {
        "the server refuses \(userId)'s registration access token (HTTP \(status)\(error.map { " \($0)" } ?? "")), "
            + "which is how some servers (Authlib) answer after they deleted the client \(clientId). keymgr keeps the "
            + "registration, since the answer does not say so for certain, and sync stops asking. If the client is gone, "
            + "run `keymgr dcr forget --user \(userId)` (removes it here without asking the server), then "
            + "`keymgr dcr register --user \(userId) …`"
    }
}

/// Per-user Dynamic Client Registration (RFC 7591) and its management (RFC 7592), stored through the facade.
public struct RegistrationService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    /// The store's home, where the per-user lock a registration read or delete shares with refreshes lives.
    let home: StoreLocation
    let logger: Logger

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation,
                logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
    }

    /// What a registration asks for: a Curity template (`software_id`) or full RFC 7591 metadata, plus the
    /// device's context in members the request leaves free.
    public static func requestMetadata(softwareId: String?, metadata: [String: JSONValue]?, scope: String?,
                                       device: DeviceContext) -> [String: JSONValue] {
        var body = metadata ?? [:]
        if let softwareId { body["software_id"] = .string(softwareId) }
        if let scope { body["scope"] = .string(scope) }
        let context: [String: JSONValue] = [
            "device_name": .string(device.deviceName), "device_id": .string(device.deviceId),
            "os_name": .string(device.osName), "os_version": .string(device.osVersion), "device_model": .string(device.model),
            "client_name": .string("keymgr on \(device.deviceName)"),
        ]
        for (name, value) in context where body[name] == nil { body[name] = value }
        return body
    }

    /// Registers a client for `userId` and stores every member of the answer, secrets sealed.
    /// Refuses when the user already has a registration at this server (`dcr delete` it first). Holds the user's
    /// lock, so of two registrations of one user at once the second waits and then finds the first's.
    public func register(userId: String, softwareId: String?, metadata: [String: JSONValue]?, scope: String?,
                         initialAccessToken: String?) async throws -> Registration {
        try manager.authorize(userId: userId)
        try TextRules.checkUser(userId: userId, username: nil)
        return try await TokenRefreshLock.holding(home: home, userId: userId, serverName: connection.serverName) {
            try await registerHoldingLock(userId: userId, softwareId: softwareId, metadata: metadata, scope: scope,
                                          initialAccessToken: initialAccessToken)
        }
    }

    private func registerHoldingLock(userId: String, softwareId: String?, metadata: [String: JSONValue]?, scope: String?,
                                     initialAccessToken: String?) async throws -> Registration {
        if try manager.registration(userId: userId, serverName: connection.serverName) != nil {
            throw SyncError(.usage, "\(userId) already has a client registration at this server: "
                + "run `keymgr dcr delete --user \(userId)` first to replace it")
        }
        let endpoint = try connection.endpoint(connection.settings.registrationEndpoint, "registration endpoint",
                                               flag: "--registration-endpoint")
        let body = Self.requestMetadata(softwareId: softwareId, metadata: metadata, scope: scope, device: try manager.deviceContext())
        logger.debug("registering a client", metadata: ["user": .string(userId), "endpoint": .string(endpoint.absoluteString)])
        let answer = try await connection.registrationClient.register(endpoint: endpoint, metadata: body,
                                                                      initialAccessToken: initialAccessToken)
        try checkManagementURI(in: answer)
        return try manager.saveRegistration(userId: userId, serverName: connection.serverName, answer: answer)
    }

    /// The grant types `keymgr login` and refreshes need.
    public static let deviceCodeGrant = "urn:ietf:params:oauth:grant-type:device_code"
    public static let refreshTokenGrant = "refresh_token"

    /// What a registration lacks for `keymgr login` and `keymgr token refresh`: one warning per grant type missing
    /// from its `grant_types` (an answer without the member has RFC 7591 §2's default, `authorization_code` alone).
    public static func loginWarnings(_ registration: Registration) -> [String] {
        let granted = Set(registration.grantTypes.isEmpty ? ["authorization_code"] : registration.grantTypes)
        let listed = granted.sorted().joined(separator: " ")
        var warnings: [String] = []
        if !granted.contains(deviceCodeGrant) {
            warnings.append("the server registered client \(registration.clientId) without the device grant "
                + "(\(deviceCodeGrant)); its grant_types are \(listed), so `keymgr login --user \(registration.userId)` "
                + "will be refused (unauthorized_client). Register with a template or metadata that grants it: "
                + "`keymgr dcr delete --user \(registration.userId)`, then `keymgr dcr register …` again")
        }
        if !granted.contains(refreshTokenGrant) {
            warnings.append("the server registered client \(registration.clientId) without refresh_token in its "
                + "grant_types (\(listed)): tokens from `keymgr login` cannot be refreshed, so \(registration.userId) "
                + "must log in again whenever they expire")
        }
        return warnings
    }

    /// Holds a `registration_client_uri` the server answered with to the profile's rules before it is stored
    /// (`ServerSettings.checkServerGivenURL`); an answer without one offers no management and passes.
    private func checkManagementURI(in answer: [String: JSONValue]) throws {
        guard let value = answer["registration_client_uri"] else { return }
        guard let text = value.stringValue, let uri = URL(string: text) else {
            throw SyncError(.badInput, "the server's registration_client_uri is not a URL: nothing was stored")
        }
        try connection.settings.checkServerGivenURL(uri, what: "registration_client_uri")
    }

    /// The stored management URI, held to the profile's rules again before the registration access token is sent
    /// to it (a store written by an older keymgr, or a profile changed since, may hold one that no longer passes).
    private func managementURI(_ registration: Registration) throws -> URL? {
        guard let uri = registration.registrationClientURI else { return nil }
        try connection.settings.checkServerGivenURL(uri, what: "registration_client_uri")
        return uri
    }

    /// `dcr show --server`: reads the registration at the server first (`check`), then returns the copy stored from
    /// its answer, as `KeyManager.clientRegistration` shows it.
    /// - Throws: `clientNotRegistered` when the server no longer knows the client (401): it was wiped here.
    public func readAtServer(userId: String, profile: String, revealing: Bool) async throws
        -> (registration: Registration, secrets: RegistrationSecrets?) {
        if try await check(userId: userId) == .wiped {
            throw SyncError(.clientNotRegistered, "the server no longer knows \(userId)'s client (401): the registration, "
                + "tokens and DPoP key were wiped here; run `keymgr dcr register --user \(userId) …`")
        }
        return try manager.clientRegistration(userId: userId, profile: profile, revealing: revealing)
    }

    /// Reads the registration at the server (RFC 7592 GET), storing the registration access token and client
    /// secret the server rotated (Curity does on every read) in one transaction. A 401 means the client is gone:
    /// the registration, its tokens and DPoP key are wiped and audited (sync rule 5). Holds the user's lock, so no
    /// refresh or login of the user sends the client secret this read rotates away.
    public func check(userId: String) async throws -> RegistrationCheck {
        try manager.authorize(userId: userId)
        return try await TokenRefreshLock.holding(home: home, userId: userId, serverName: connection.serverName) {
            try await checkHoldingLock(userId: userId)
        }
    }

    private func checkHoldingLock(userId: String) async throws -> RegistrationCheck {
        let server = connection.serverName
        guard let registration = try manager.registration(userId: userId, serverName: server) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no client registration: run `keymgr dcr register --user \(userId) …`")
        }
        guard let uri = try managementURI(registration),
              let token = try manager.registrationSecrets(userId: userId, serverName: server).registrationAccessToken else {
            return .current(registration)  // the server offers no management for this client
        }
        switch try await connection.registrationClient.read(registrationClientURI: uri, registrationAccessToken: token) {
        case .refused(let status, let error):
            try manager.markRegistrationRefused(userId: userId, serverName: server,
                                                reason: "the registration endpoint answered \(status)\(error.map { " \($0)" } ?? "")")
            throw SyncError(.unAuthorize, Self.refusalMessage(userId: userId, clientId: registration.clientId,
                                                              status: status, error: error))
        case .gone:
            try manager.wipeRegistration(userId: userId, serverName: server, event: "dcr.revokedByServer",
                                         reason: "the registration endpoint answered 401")
            return .wiped
        case .current(let answer):
            try checkManagementURI(in: answer)
            return .current(try manager.saveRegistration(userId: userId, serverName: server, answer: answer, event: "dcr.read"))
        }
    }

    /// Deletes the client at the server (RFC 7592 DELETE; already gone is fine), then its registration, tokens and
    /// DPoP key here. Holds the user's lock, so no refresh stores tokens of the deleted client after the wipe.
    /// `confirm` is asked first, with the registration about to be deleted (a user with none fails before it is
    /// asked), and may throw to stop; it runs before the user's lock is taken, so a person's slow answer holds no lock.
    public func delete(userId: String, confirm: @Sendable (Registration) throws -> Void = { _ in }) async throws {
        try manager.authorize(userId: userId)
        guard let registration = try manager.registration(userId: userId, serverName: connection.serverName) else {
            throw SyncError(.clientNotRegistered,
                                  "\(userId) has no client registration at the server profile \(connection.serverName)")
        }
        try confirm(registration)
        try await TokenRefreshLock.holding(home: home, userId: userId, serverName: connection.serverName) {
            try await deleteHoldingLock(userId: userId)
        }
    }

    private func deleteHoldingLock(userId: String) async throws {
        let server = connection.serverName
        guard let registration = try manager.registration(userId: userId, serverName: server) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no client registration at this server")
        }
        if let uri = try managementURI(registration),
           let token = try manager.registrationSecrets(userId: userId, serverName: server).registrationAccessToken {
            do {
                try await connection.registrationClient.delete(registrationClientURI: uri, registrationAccessToken: token)
            } catch let failure as TransportError where failure.verdict?.status == 400 || failure.verdict?.status == 403 {
                throw failure.adding(": if it is gone, run `keymgr dcr forget --user \(userId)` to remove the registration "
                    + "here without asking the server")
            }
        }
        try manager.wipeRegistration(userId: userId, serverName: server, event: "dcr.deleted", reason: "deleted by keymgr dcr delete")
    }

    /// Removes the user's registration here, with its tokens and DPoP key, without a request to the server (whose
    /// answers no longer tell whether the client exists): `keymgr dcr forget`. Audited as `dcr.forgotten`.
    public func forget(userId: String, confirm: @Sendable (Registration) throws -> Void = { _ in }) async throws {
        try manager.authorize(userId: userId)
        guard let registration = try manager.registration(userId: userId, serverName: connection.serverName) else {
            throw SyncError(.clientNotRegistered,
                            "\(userId) has no client registration at the server profile \(connection.serverName)")
        }
        try confirm(registration)
        _ = try await TokenRefreshLock.holding(home: home, userId: userId, serverName: connection.serverName) {
            try manager.wipeRegistration(userId: userId, serverName: connection.serverName, event: "dcr.forgotten",
                                         reason: "removed here by keymgr dcr forget; the server was not asked")
        }
    }

    /// Deletes the user's client at the server only (RFC 7592 DELETE; already gone is fine), for callers that wipe
    /// the registration here in a transaction of their own. Returns false when the user has no registration at this
    /// server or keymgr holds no management credential (registration client URI and access token) for it.
    /// Holds the user's lock while it talks to the server, as `delete` does.
    public func deleteAtServer(userId: String) async throws -> Bool {
        try manager.authorize(userId: userId)
        return try await TokenRefreshLock.holding(home: home, userId: userId, serverName: connection.serverName) {
            try await deleteAtServerHoldingLock(userId: userId)
        }
    }

    private func deleteAtServerHoldingLock(userId: String) async throws -> Bool {
        let server = connection.serverName
        guard let registration = try manager.registration(userId: userId, serverName: server),
              let uri = try managementURI(registration),
              let token = try manager.registrationSecrets(userId: userId, serverName: server).registrationAccessToken else {
            return false
        }
        try await connection.registrationClient.delete(registrationClientURI: uri, registrationAccessToken: token)
        return true
    }

    /// Sync rule 5 for every registration at this server (`checked` of them); one user's failure is that user's alone.
    /// A registration whose access token the server refused before (`refusedByServer`) was reported then: it is
    /// not read again, only listed in `refused`.
    public func checkAll() async -> (checked: Int, wiped: [String], refused: [String], errors: [SyncSummary.UserError]) {
        var wiped: [String] = []
        var refused: [String] = []
        var errors: [SyncSummary.UserError] = []
        let all = ((try? manager.registrations()) ?? []).filter { $0.serverName == connection.serverName }
        let registrations = all.filter { !$0.refusedByServer }
        refused = all.filter(\.refusedByServer).map(\.userId)
        for registration in registrations {
            do {
                if try await check(userId: registration.userId) == .wiped { wiped.append(registration.userId) }
            } catch let failure as any KeymgrFailure {
                errors.append(.init(userId: registration.userId, failure))
            } catch {
                errors.append(.init(userId: registration.userId, code: .failure, message: "\(error)"))
            }
        }
        return (registrations.count, wiped, refused, errors)
    }
}
