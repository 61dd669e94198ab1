import Foundation
import KeyManager
import Logging
import ServerClients
import Synchronization

/// Binds and signs through PingAM journeys: the journey client carries the steps, the facade makes the key
/// and the JWS the server's callback asks for.
public struct JourneyService: Sendable {
    public let manager: KeyManager
    let client: any JourneyRunner
    let logger: Logger

    public init(manager: KeyManager, client: any JourneyRunner, logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.client = client
        self.logger = logger
    }

    /// The journeys of the configured server (`config` when it is not a PingAM server).
    public init(manager: KeyManager, connection: ServerConnection, logger: Logger = KeyManager.silentLogger) throws {
        self.init(manager: manager, client: try connection.journeyClient(), logger: logger)
    }

    /// A password as the journey's answer carries it: its text.
    private static func text(of password: SecretBytes) -> String {
        password.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    /// Warns that a journey's session stayed open (never showing it): the journey itself succeeded.
    private var sessionNotEnded: @Sendable (TransportError) -> Void {
        let logger = logger
        return { error in logger.warning("\(error.message)") }
    }

    /// Runs `journey`, binding a key when the server sends a DeviceBindingCallback; returns the key, registered.
    ///
    /// The callback's `authenticationType` decides the auth type; a conflicting `requestedAuthType` is a usage error.
    /// The new key is stored only once the server accepted it: until then the user's current key stays active, and
    /// when the server refuses, the new key is dropped and the current one stays as it was.
    /// - Parameter newPIN: asked only when the server wants an APPLICATION_PIN key.
    /// - Parameter password: asked only if the journey has a PasswordCallback.
    /// - Parameter userId: the user asked for (`--user`): a callback naming another user is refused (`refuseAnotherUser`).
    public func bind(journey: String, username: String, userId: String, password: @escaping @Sendable () throws -> SecretBytes,
                     requestedAuthType: AuthType?,
                     newPIN: @escaping @Sendable () throws -> SecretBytes) async throws -> BindResult {
        try manager.authorize(userId: userId)
        // Before the NameCallback carries the username to the server or the user is stored.
        try TextRules.checkUser(userId: userId, username: username)
        let credentials = JourneyCredentials(username: username, password: { try Self.text(of: password()) })
        let identity = try manager.deviceIdentity()
        let manager = manager
        let prepared = PreparedBinding()
        let pending: PendingBinding
        let asked: String
        do {
            asked = try manager.resolveUser(userId)
            pending = try await client.run(journey: journey, credentials: credentials, answering: "DeviceBindingCallback",
                                           sessionNotEnded: sessionNotEnded, screen: { callback in
                try Self.refuseAnotherUser(binding: callback, asked: [userId, asked], login: credentials.username)
            }) { callback in
                guard let authName = callback.outputValue("authenticationType")?.stringValue, let authType = AuthType(flag: authName) else {
                    throw SyncError(.unsupported, "the server asked for an auth type keymgr does not know")
                }
                if let requestedAuthType, requestedAuthType != authType {
                    throw SyncError(.usage, "the journey \(journey) binds with \(authType.rawValue), but --auth-type says \(requestedAuthType.rawValue): drop --auth-type")
                }
                var request = BindRequest(userId: try callback.output("userId"))
                let named = callback.outputValue("username")?.stringValue ?? ""
                request.username = named.isEmpty ? credentials.username : named
                request.authType = authType
                request.challenge = try callback.output("challenge")
                request.expiresIn = try callback.jwsLifetime()
                request.verifierTimeout = callback.operationTimeout
                let pending = try manager.prepareBinding(request, newPIN: newPIN)
                prepared.value.withLock { $0 = pending }
                return .init(inputs: [
                    "jws": .string(pending.jws ?? ""), "deviceName": .string(identity.deviceName),
                    "deviceId": .string(identity.deviceId),
                ], value: pending)
            }
        } catch {
            if let refused = prepared.value.withLock({ $0 }) {
                try? manager.discardBinding(refused, reason: (error as? any KeymgrFailure)?.message ?? "the journey failed")
            }
            throw error
        }
        // One person, one identity: the local identity `--user` named (`bob`) is the one the server names
        // `id=bob,ou=user,…`; the facade adopts it when that is safe.
        let local = asked != pending.userId && (UniversalId.idValue(pending.userId) ?? pending.userId) == asked ? asked : nil
        return try manager.commitBinding(pending, deviceName: identity.deviceName, adopting: local)
    }

    /// Runs `journey`, signing the server's challenge when it sends a DeviceSigningVerifierCallback.
    ///
    /// The callback names the user, or (a usernameless journey) leaves `userId` empty: then the key is the one
    /// `kid` names, else the only usable key of `userId`, else the only usable key on this device
    /// (`KeyManager.chooseKey`); the JWS `sub` is that key's userId.
    public func sign(journey: String, username: String, password: @escaping @Sendable () throws -> SecretBytes,
                     userId: String? = nil, kid: String? = nil, claims: [String: JSONValue],
                     pin: @escaping @Sendable () throws -> SecretBytes) async throws -> SignResult {
        if let userId { try manager.authorize(userId: userId) }
        let credentials = JourneyCredentials(username: username, password: { try Self.text(of: password()) })
        let manager = manager
        // The user asked for: --user, else the owner of --kid; with neither, the first user a callback names, so one
        // step never gets signatures of two users. Found when a callback names a user, not before the journey.
        let asked = Mutex<String?>(userId)
        return try await client.run(journey: journey, credentials: credentials, answering: "DeviceSigningVerifierCallback",
                                    sessionNotEnded: sessionNotEnded, screen: { callback in
            let named = callback.outputValue("userId")?.stringValue ?? ""
            guard !named.isEmpty else { return }  // usernameless: the key is chosen below, as before
            let expected = try asked.withLock { expected in
                if expected == nil { expected = try kid.map { try manager.chooseKey(userId: nil, kid: $0).userId } ?? named }
                return expected ?? named
            }
            guard named == expected else { throw Self.anotherUser(named, expected: expected, signing: true) }
        }) { callback in
            let named = callback.outputValue("userId")?.stringValue ?? ""
            var request: SignRequest
            if named.isEmpty {
                request = SignRequest(userId: nil, kid: try manager.chooseKey(userId: userId, kid: kid).kid)
            } else {
                request = SignRequest(userId: named, kid: kid)
            }
            request.challenge = try callback.output("challenge")
            request.claims = claims
            request.expiresIn = try callback.jwsLifetime()
            request.verifierTimeout = callback.operationTimeout
            let result = try manager.sign(request, pin: pin)
            return .init(inputs: ["jws": .string(result.jws)], value: result)
        }
    }
}

extension JourneyService {
    /// Refuses a DeviceBindingCallback for another user than the one asked for: its `userId` must be `--user` (or the
    /// user id it resolves to), or a universal id whose `id=` value is `--user` or the login name the journey was
    /// answered with; a `username` it names must be that login name (PingAM compares login names without case).
    static func refuseAnotherUser(binding callback: DeviceCallback, asked: [String], login: String) throws {
        let named = callback.outputValue("userId")?.stringValue ?? ""
        let idValue = UniversalId.idValue(named)
        guard asked.contains(named) || idValue.map({ asked.contains($0) || $0 == login }) == true else {
            throw anotherUser(named, expected: asked[0], signing: false)
        }
        let username = callback.outputValue("username")?.stringValue ?? ""
        guard username.isEmpty || username.caseInsensitiveCompare(login) == .orderedSame || asked.contains(username) else {
            throw anotherUser(username, expected: login, signing: false)
        }
    }

    /// What a device callback for another user gets: `badInput` (exit 65), told to the server as the SDKs' `Abort`.
    static func anotherUser(_ named: String, expected: String, signing: Bool) -> SyncError {
        SyncError(.badInput, "the server asked to \(signing ? "sign" : "bind a key") for \(named), but keymgr was asked "
            + "for \(expected): it \(signing ? "signs" : "binds") only for the user asked for, so nothing was "
            + "\(signing ? "signed" : "bound") (the server was told Abort). Check the journey with the server's administrator")
    }
}

/// Where the answer to a binding callback leaves the key it made, so a refusal can drop it.
private final class PreparedBinding: Sendable {
    let value = Mutex<PendingBinding?>(nil)
}
