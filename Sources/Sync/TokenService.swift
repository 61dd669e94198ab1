import Foundation
import KeyManager
import Logging
import ServerClients

/// One use of a user's client credentials at a time per user and server, across processes: an exclusive
/// open-file-description lock (`F_OFD_SETLK`) on one byte of `oauth.lock` in the home, the byte chosen by a hash of
/// the user and server. One file serves every user, so no lock file is left behind per user; two users whose hashes
/// collide only wait for each other.
///
/// Held by a refresh (so two processes never spend one refresh token), by each device-grant request and poll, by a
/// token revocation, by a registration (so one user never gets two clients at once) and by a registration read or
/// delete: a Curity-like server rotates the client secret and the
/// registration access token on every registration read, so a secret read before a read must not be sent after it.
/// The kernel releases it when the holder exits or is killed, so a killed refresh never blocks the next.
final class TokenRefreshLock {
    private let lock: FileLock

    /// Waits up to `timeout` seconds for the lock (sleeping between tries, never blocking a thread); `busy` after that.
    static func acquire(home: StoreLocation, userId: String, serverName: String, timeout: TimeInterval = 60) async throws -> TokenRefreshLock {
        let lock = try TokenRefreshLock(home: home, userId: userId, serverName: serverName)
        let deadline = Date().addingTimeInterval(timeout)
        while try !lock.lock.tryLock(cannotLock: { KeyManagerError(.failure, "cannot lock the refresh lock: \($0)") }) {
            guard Date() < deadline else {
                lock.release()
                throw KeyManagerError(.busy, "another keymgr process has been refreshing these tokens for too long: try again")
            }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return lock
    }

    /// Runs `body` holding the lock of `userId` at `serverName`.
    static func holding<T>(home: StoreLocation, userId: String, serverName: String,
                           _ body: () async throws -> T) async throws -> T {
        let lock = try await acquire(home: home, userId: userId, serverName: serverName)
        defer { lock.release() }
        return try await body()
    }

    /// The one lock file of every user's OAuth credentials, in the home.
    static let fileName = "oauth.lock"

    private init(home: StoreLocation, userId: String, serverName: String) throws {
        try home.checkUsable()
        let path = home.url.appendingPathComponent(Self.fileName).path
        lock = try FileLock(path: path, region: .byte(Self.offset(serverName + "\u{0}" + userId))) {
            KeyManagerError(.config, "cannot open the refresh lock \(path): \($0)")
        }
    }

    func release() {
        lock.release()
    }

    /// Where in the lock file the lock of `text` lies: a stable hash of its UTF-8 (FNV-1a, not a security
    /// boundary), kept below 2^62 so it is a valid positive offset.
    static func offset(_ text: String) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int(hash & 0x3FFF_FFFF_FFFF_FFFF)
    }
}

/// A user's OAuth tokens: import, refresh (single-flight across processes), revoke, a fresh access token for
/// scripts, and DPoP proofs with the user's DPoP key.
public struct TokenService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    let home: StoreLocation
    let logger: Logger
    let nonces = DPoPNonces()

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation, logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
    }

    var serverName: String { connection.serverName }
    var bound: Bool { connection.settings.tokenBinding == .bound }

    /// The client credentials of the user's registration.
    func credentials(userId: String) throws -> OAuthClientCredentials {
        guard let registration = try manager.registration(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no client registration at this server: "
                + "run `keymgr dcr register --user \(userId) --software-id TEMPLATE` first")
        }
        let secrets = try manager.registrationSecrets(userId: userId, serverName: serverName)
        return OAuthClientCredentials(clientId: registration.clientId, clientSecret: secrets.clientSecret,
                                      authMethod: registration.tokenEndpointAuthMethod)
    }

    static func proofMaker(_ key: DPoPKey?) -> DPoPProofMaker? {
        guard let key else { return nil }
        return { htm, htu, nonce, accessToken in try key.proof(htm: htm, htu: htu, nonce: nonce, accessToken: accessToken) }
    }

    /// The DPoP key requests for the user carry: the stored one when the profile is `--bound`, none when it is
    /// `--unbound` (such a profile never sends a DPoP header, even for tokens bound under an earlier setting).
    func requestKey(userId: String) throws -> DPoPKey? {
        bound ? try manager.dpopKey(userId: userId, serverName: serverName) : nil
    }

    /// A `--bound` profile takes only DPoP-bound tokens: a server that ignored the proof and issued Bearer
    /// tokens (as servers without DPoP do) gets `serverRejected`, and nothing is stored. `token_type` is
    /// compared as the parser normalised it, so `dpop` in lower case is DPoP.
    func checkBinding(_ issued: OAuthTokenResponse) throws {
        guard bound, issued.tokenType != "DPoP" else { return }
        throw KeyManagerError(.serverRejected, "the server issued \(issued.tokenType) tokens, not DPoP-bound ones, "
            + "although this profile is --bound; nothing was stored. If this server does not support DPoP, choose "
            + "unbound tokens with `keymgr server set … --unbound` and log in again")
    }

    /// Stores a token response obtained elsewhere (RFC 6749 §5.1 JSON). Such tokens are not bound to a key
    /// keymgr holds, so they are stored as unbound; a `--bound` profile refuses Bearer tokens.
    public func importTokens(userId: String, json: Data) throws -> TokenSet {
        let response: OAuthTokenResponse
        do {
            response = try OAuthTokenResponse.parse(json)
        } catch let failure as TransportError {
            throw KeyManagerError(.badInput, "stdin is not a token response: \(failure.message)")
        }
        try checkBinding(response)
        let clientId = try credentials(userId: userId).clientId
        return try manager.storeTokens(userId: userId, serverName: serverName, clientId: clientId,
                                       issued: response, dpopKey: nil, event: "tokens.imported")
    }

    /// Refreshes the user's tokens now, one process at a time: the revision is read before the lock is taken and
    /// compared under it, so when another process refreshed while this one waited, its tokens are the answer and
    /// the old refresh token is never spent again.
    public func refresh(userId: String) async throws -> TokenSet {
        guard let seen = try manager.tokenSet(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
        }
        return try await refresh(userId: userId, seen: seen.revision)
    }

    /// Refreshes the user's tokens, one process at a time. When the stored tokens changed since the caller saw
    /// revision `seen` (another process refreshed while this one waited for the lock), those are used and the
    /// old refresh token is never spent again.
    package func refresh(userId: String, seen: String?) async throws -> TokenSet {
        let lock = try await TokenRefreshLock.acquire(home: home, userId: userId, serverName: serverName)
        defer { lock.release() }
        guard let current = try manager.tokenSet(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
        }
        if let seen, current.revision != seen {
            logger.debug("another process refreshed these tokens", metadata: ["user": .string(userId)])
            return current
        }
        guard let refreshToken = try manager.tokenSecrets(userId: userId, serverName: serverName).refreshToken else {
            throw KeyManagerError(.unAuthorize, "\(userId) has no refresh token: run `keymgr login --user \(userId)` again")
        }
        let key = try requestKey(userId: userId)
        let client = try credentials(userId: userId)
        let response: OAuthTokenResponse
        do {
            response = try await connection.tokenClient(nonces: nonces).refresh(
                tokenEndpoint: try connection.tokenEndpoint, refreshToken: refreshToken, client: client, scope: nil,
                dpop: Self.proofMaker(key))
        } catch let failure as TransportError {
            throw try explain(failure, userId: userId, refreshing: true)
        }
        try checkBinding(response)
        return try manager.storeTokens(userId: userId, serverName: serverName, clientId: client.clientId,
                                       issued: response, dpopKey: response.tokenType == "DPoP" ? key : nil,
                                       event: "tokens.refreshed")
    }

    /// An access token valid for more than `minTTL` seconds, refreshing first (single-flight) when needed.
    public func accessToken(userId: String, minTTL: TimeInterval) async throws -> (token: String, set: TokenSet) {
        guard var set = try manager.tokenSet(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
        }
        if let expiresAt = set.expiresAt, expiresAt.timeIntervalSinceNow <= minTTL {
            set = try await refresh(userId: userId, seen: set.revision)
        }
        guard let token = try manager.tokenSecrets(userId: userId, serverName: serverName).accessToken else {
            throw KeyManagerError(.unAuthorize, "\(userId) has no access token: run `keymgr login --user \(userId)` again")
        }
        return (token, set)
    }

    /// Revokes the refresh token (which takes its access tokens with it) and the access token at the server
    /// (RFC 7009), then discards the tokens and the DPoP key here.
    /// `confirm` is asked first, with the tokens about to be revoked (a user with none fails before it is asked), and
    /// may throw to stop; it runs before the user's lock is taken, so a person's slow answer holds no lock.
    public func revoke(userId: String, confirm: @Sendable (TokenSet) throws -> Void = { _ in }) async throws {
        guard let set = try manager.tokenSet(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no tokens to revoke at the server profile \(serverName)")
        }
        try confirm(set)
        try await TokenRefreshLock.holding(home: home, userId: userId, serverName: serverName) {
            try await revokeHoldingLock(userId: userId)
        }
    }

    private func revokeHoldingLock(userId: String) async throws {
        guard try manager.tokenSet(userId: userId, serverName: serverName) != nil else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no tokens to revoke")
        }
        let secrets = try manager.tokenSecrets(userId: userId, serverName: serverName)
        let client = try credentials(userId: userId)
        let endpoint = try connection.endpoint(connection.settings.revocationEndpoint, "revocation endpoint", flag: "--revocation-endpoint")
        let tokens = connection.tokenClient(nonces: nonces)
        do {
            if let refresh = secrets.refreshToken {
                try await tokens.revoke(endpoint: endpoint, token: refresh, hint: "refresh_token", client: client)
            }
            if let access = secrets.accessToken {
                try await tokens.revoke(endpoint: endpoint, token: access, hint: "access_token", client: client)
            }
        } catch let failure as TransportError where failure.oauthError != .invalidClient {
            throw failure
        }
        try manager.discardTokens(userId: userId, serverName: serverName, reason: "revoked")
    }

    /// A DPoP proof by the user's DPoP key, for a script's own request.
    public func proof(userId: String, htm: String, htu: URL, nonce: String?, accessToken: String?) throws -> String {
        guard let key = try manager.dpopKey(userId: userId, serverName: serverName) else {
            throw KeyManagerError(.clientNotRegistered, "\(userId) has no DPoP key: the tokens are unbound or missing "
                + "(run `keymgr login --user \(userId)` with a --bound profile)")
        }
        return try key.proof(htm: htm, htu: htu, nonce: nonce, accessToken: accessToken)
    }

    /// Calls a protected resource with the user's access token (DPoP with nonce retry, or Bearer).
    public func callResource(userId: String, method: String, url: URL) async throws -> HTTPResponse {
        let (token, set) = try await accessToken(userId: userId, minTTL: 60)
        let key = try requestKey(userId: userId)
        return try await connection.tokenClient(nonces: nonces).resource(method: method, url: url, accessToken: token,
                                                                         tokenType: set.tokenType, dpop: Self.proofMaker(key))
    }

    /// A token endpoint failure in terms of what to do next; `invalid_grant` discards the tokens and DPoP key.
    func explain(_ failure: TransportError, userId: String, refreshing: Bool) throws -> any Error {
        switch failure.oauthError {
        case .invalidGrant where refreshing:
            try manager.discardTokens(userId: userId, serverName: serverName, reason: "invalid_grant")
            return KeyManagerError(.unAuthorize, "the server no longer accepts \(userId)'s refresh token; the tokens and DPoP key "
                + "were discarded: run `keymgr login --user \(userId)` again")
        case .invalidClient:
            return KeyManagerError(.unAuthorize, "the server no longer knows \(userId)'s client (invalid_client): "
                + "run `keymgr dcr delete --user \(userId)` and `keymgr dcr register --user \(userId) …` again")
        case .invalidDPoPProof where !bound:
            return KeyManagerError(.config, "this server requires DPoP-bound tokens: set the profile to --bound "
                + "(`keymgr server set … --bound`)")
        default:
            return failure
        }
    }

}

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
        let connection = tokens.connection
        let endpoint = try connection.endpoint(connection.settings.deviceAuthorizationEndpoint, "device authorization endpoint",
                                               flag: "--device-authorization-endpoint")
        let registered = try tokens.manager.registration(userId: userId, serverName: tokens.serverName)
        let scope = scope ?? registered?.scope
        return try await TokenRefreshLock.holding(home: tokens.home, userId: userId, serverName: tokens.serverName) {
            try await connection.tokenClient(nonces: tokens.nonces).authorizeDevice(
                endpoint: endpoint, client: try tokens.credentials(userId: userId), scope: scope)
        }
    }

    /// Polls at the server's interval (5 s slower on each `slow_down`) until the person approves, then stores the
    /// tokens, bound to a new DPoP key when the profile is bound. Each poll reads the client credentials afresh
    /// under the user's lock: a sync may have rotated the client secret since the last one.
    public func finish(userId: String, _ authorization: DeviceAuthorization) async throws -> TokenSet {
        let connection = tokens.connection
        let key = tokens.bound ? try DPoPKey.generate() : nil
        let endpoint = try connection.tokenEndpoint
        let deadline = Date().addingTimeInterval(TimeInterval(authorization.expiresIn))
        var interval = authorization.interval
        let tokenClient = connection.tokenClient(nonces: tokens.nonces)
        while true {
            try await Task.sleep(nanoseconds: UInt64(interval) * 1_000_000_000)
            guard Date() < deadline.addingTimeInterval(TimeInterval(interval)) else {
                throw KeyManagerError(.timeout, "the login code expired before it was approved: run `keymgr login` again")
            }
            let lock = try await TokenRefreshLock.acquire(home: tokens.home, userId: userId, serverName: tokens.serverName)
            defer { lock.release() }
            let client = try tokens.credentials(userId: userId)
            let result: DevicePollResult
            do {
                result = try await tokenClient.pollDeviceCode(tokenEndpoint: endpoint, deviceCode: authorization.deviceCode,
                                                              client: client, dpop: TokenService.proofMaker(key))
            } catch let failure as TransportError {
                throw try tokens.explain(failure, userId: userId, refreshing: false)
            }
            switch result {
            case .pending: continue
            case .slowDown: interval += 5
            case .tokens(let response):
                try tokens.checkBinding(response)
                return try tokens.manager.storeTokens(
                    userId: userId, serverName: tokens.serverName, clientId: client.clientId,
                    issued: response, dpopKey: response.tokenType == "DPoP" ? key : nil, event: "tokens.login")
            }
        }
    }
}
