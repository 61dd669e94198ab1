import Foundation
import KeyManager
import ServerClients

/// `keymgr login`: the device authorization grant (RFC 8628), so a person at a shared terminal gets tokens
/// without a browser on it.
public struct DeviceLoginService: Sendable {
    let tokens: TokenService

    public init(tokens: TokenService) {
        self.tokens = tokens
    }

    /// The whole login: asks for a user code, hands it to `show` (which tells the person where to enter it), then
    /// polls until they approve and stores the tokens.
    public func login(userId: String, scope: String?, show: @Sendable (DeviceAuthorization) -> Void) async throws -> TokenSet {
        let authorization = try await start(userId: userId, scope: scope)
        show(authorization)
        return try await finish(userId: userId, authorization)
    }

    /// Asks the server for a user code and verification URI to show.
    public func start(userId: String, scope: String?) async throws -> DeviceAuthorization {
        try tokens.manager.authorize(userId: userId)
        let connection = tokens.connection
        let endpoint = try connection.endpoint(connection.settings.deviceAuthorizationEndpoint, "device authorization endpoint",
                                               flag: "--device-authorization-endpoint")
        let registered = try tokens.manager.registration(userId: userId, serverName: tokens.serverName)
        let scope = scope ?? registered?.scope
        return try await TokenRefreshLock.holding(home: tokens.home, userId: userId, serverName: tokens.serverName) {
            defer { tokens.rememberClock() }
            return try await tokens.tokenClient.authorizeDevice(
                endpoint: endpoint, client: try tokens.credentials(userId: userId), scope: scope)
        }
    }

    /// Polls at the server's interval (5 s slower on each `slow_down`) until the person approves, then stores the
    /// tokens, bound to a new DPoP key when the profile is bound. Each poll reads the client credentials afresh
    /// under the user's lock: a sync may have rotated the client secret since the last one.
    public func finish(userId: String, _ authorization: DeviceAuthorization) async throws -> TokenSet {
        try tokens.manager.authorize(userId: userId)
        let connection = tokens.connection
        let key = tokens.bound ? try DPoPKey.generate() : nil
        let endpoint = try connection.tokenEndpoint
        let deadline = Date().addingTimeInterval(TimeInterval(authorization.expiresIn))
        var interval = authorization.interval
        let tokenClient = tokens.tokenClient
        defer { tokens.rememberClock() }
        while true {
            try await OwnThreads.sleep(seconds: TimeInterval(interval))
            guard Date() < deadline.addingTimeInterval(TimeInterval(interval)) else {
                throw SyncError(.timeout, "the login code expired before it was approved: run `keymgr login` again")
            }
            let lock = try await TokenRefreshLock.acquire(home: tokens.home, userId: userId, serverName: tokens.serverName)
            defer { lock.release() }
            let client = try tokens.credentials(userId: userId)
            let result: DevicePollResult
            do {
                result = try await tokenClient.pollDeviceCode(tokenEndpoint: endpoint, deviceCode: authorization.deviceCode,
                                                              client: client, dpop: tokens.proofMaker(key))
            } catch let failure as TransportError {
                throw try tokens.explain(failure, userId: userId, refreshing: false)
            }
            switch result {
            case .pending: continue
            case .slowDown: interval += 5
            case .tokens(let response):
                do {
                    try tokens.checkBinding(response)
                    return try tokens.manager.storeTokens(
                        userId: userId, serverName: tokens.serverName, clientId: client.clientId,
                        issued: response, dpopKey: response.tokenType == "DPoP" ? key : nil, event: "tokens.login",
                        serverClockOffset: tokens.clock.offset)
                } catch {
                    // The device code is spent: tokens keymgr will not keep must not stay live at the server.
                    let revoked = await tokens.revokeIssued(response, client: client)
                    throw TokenService.refused(error, revoked: revoked, after: "the login")
                }
            }
        }
    }
}
