import Foundation
import KeyManager
import ServerClients

/// Binds and signs through PingAM journeys: the journey client carries the steps, the facade makes the key
/// and the JWS the server's callback asks for.
public struct JourneyService: Sendable {
    public let manager: KeyManager
    let client: PingAMJourneyClient

    public init(manager: KeyManager, client: PingAMJourneyClient) {
        self.manager = manager
        self.client = client
    }

    /// The journeys of the configured server (`config` when it is not a PingAM server).
    public init(manager: KeyManager, connection: ServerConnection) throws {
        self.init(manager: manager, client: try connection.journeyClient())
    }

    /// Runs `journey`, binding a key when the server sends a DeviceBindingCallback; returns the key, registered.
    ///
    /// The callback's `authenticationType` decides the auth type; a conflicting `requestedAuthType` is a usage error.
    /// - Parameter newPIN: asked only when the server wants an APPLICATION_PIN key.
    /// - Parameter password: asked only if the journey has a PasswordCallback.
    public func bind(journey: String, username: String, password: @escaping @Sendable () throws -> SecretBytes,
                     requestedAuthType: AuthType?, newPIN: @escaping SecretProvider) async throws -> BindResult {
        let credentials = PingAMJourneyClient.Credentials(username: username, password: password)
        let identity = try manager.deviceIdentity()
        var bound: BindResult?
        try await client.run(journey: journey, credentials: credentials, answering: "DeviceBindingCallback") { callback in
            guard let authName = callback.outputValue("authenticationType")?.stringValue, let authType = AuthType(flag: authName) else {
                throw KeyManagerError(.unsupported, "the server asked for an auth type keymgr does not know")
            }
            if let requestedAuthType, requestedAuthType != authType {
                throw KeyManagerError(.usage, "the journey \(journey) binds with \(authType.rawValue), but --auth-type says \(requestedAuthType.rawValue): drop --auth-type")
            }
            var request = BindRequest(userId: try callback.output("userId"))
            request.username = callback.outputValue("username")?.stringValue ?? credentials.username
            request.authType = authType
            request.challenge = try callback.output("challenge")
            request.expiresIn = try callback.jwsLifetime()
            let result = try manager.bind(request, newPIN: newPIN)
            callback.set("jws", .string(result.jws ?? ""))
            callback.set("deviceName", .string(identity.deviceName))
            callback.set("deviceId", .string(identity.deviceId))
            bound = result
        }
        guard var result = bound else {
            throw KeyManagerError(.serverRejected, "the journey \(journey) ended without binding a key")
        }
        try manager.markRegistered(kid: result.key.kid, deviceName: identity.deviceName)
        result.key.serverState = .registered
        result.key.deviceName = identity.deviceName
        return result
    }

    /// Runs `journey`, signing the server's challenge when it sends a DeviceSigningVerifierCallback.
    public func sign(journey: String, username: String, password: @escaping @Sendable () throws -> SecretBytes,
                     claims: [String: JSONValue], pin: @escaping SecretProvider) async throws -> SignResult {
        let credentials = PingAMJourneyClient.Credentials(username: username, password: password)
        var signed: SignResult?
        try await client.run(journey: journey, credentials: credentials, answering: "DeviceSigningVerifierCallback") { callback in
            var request = SignRequest(userId: try callback.output("userId"), kid: nil)
            request.challenge = try callback.output("challenge")
            request.claims = claims
            request.expiresIn = try callback.jwsLifetime()
            let result = try manager.sign(request, pin: pin)
            callback.set("jws", .string(result.jws))
            signed = result
        }
        guard let signed else {
            throw KeyManagerError(.serverRejected, "the journey \(journey) ended without signing")
        }
        return signed
    }
}
