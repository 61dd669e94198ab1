import Foundation
import KeyManager
import Logging
import ServerClients
import Synchronization

/// Binds and signs through PingAM journeys: the journey client carries the steps, the facade makes the key
/// and the JWS the server's callback asks for.
public struct JourneyService: Sendable {
    public let manager: KeyManager
    let client: PingAMJourneyClient
    let logger: Logger

    public init(manager: KeyManager, client: PingAMJourneyClient, logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.client = client
        self.logger = logger
    }

    /// The journeys of the configured server (`config` when it is not a PingAM server).
    public init(manager: KeyManager, connection: ServerConnection, logger: Logger = KeyManager.silentLogger) throws {
        self.init(manager: manager, client: try connection.journeyClient(), logger: logger)
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
    public func bind(journey: String, username: String, password: @escaping @Sendable () throws -> SecretBytes,
                     requestedAuthType: AuthType?,
                     newPIN: @escaping @Sendable () throws -> SecretBytes) async throws -> BindResult {
        let credentials = PingAMJourneyClient.Credentials(username: username, password: password)
        let identity = try manager.deviceIdentity()
        let manager = manager
        let prepared = PreparedBinding()
        let pending: PendingBinding
        do {
            pending = try await client.run(journey: journey, credentials: credentials, answering: "DeviceBindingCallback",
                                           sessionNotEnded: sessionNotEnded) { callback in
                guard let authName = callback.outputValue("authenticationType")?.stringValue, let authType = AuthType(flag: authName) else {
                    throw KeyManagerError(.unsupported, "the server asked for an auth type keymgr does not know")
                }
                if let requestedAuthType, requestedAuthType != authType {
                    throw KeyManagerError(.usage, "the journey \(journey) binds with \(authType.rawValue), but --auth-type says \(requestedAuthType.rawValue): drop --auth-type")
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
        return try manager.commitBinding(pending, deviceName: identity.deviceName)
    }

    /// Runs `journey`, signing the server's challenge when it sends a DeviceSigningVerifierCallback.
    ///
    /// The callback names the user, or (a usernameless journey) leaves `userId` empty: then the key is the one
    /// `kid` names, else the only usable key of `userId`, else the only usable key on this device
    /// (`KeyManager.chooseKey`); the JWS `sub` is that key's userId.
    public func sign(journey: String, username: String, password: @escaping @Sendable () throws -> SecretBytes,
                     userId: String? = nil, kid: String? = nil, claims: [String: JSONValue],
                     pin: @escaping @Sendable () throws -> SecretBytes) async throws -> SignResult {
        let credentials = PingAMJourneyClient.Credentials(username: username, password: password)
        let manager = manager
        return try await client.run(journey: journey, credentials: credentials, answering: "DeviceSigningVerifierCallback",
                                    sessionNotEnded: sessionNotEnded) { callback in
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

/// Where the answer to a binding callback leaves the key it made, so a refusal can drop it.
private final class PreparedBinding: Sendable {
    let value = Mutex<PendingBinding?>(nil)
}
