import Foundation
import KeyManager
import Logging
import ServerClients

/// A user's OAuth tokens: import, refresh (single-flight across processes), revoke, a fresh access token for
/// scripts, and DPoP proofs with the user's DPoP key.
public struct TokenService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    let home: StoreLocation
    let logger: Logger
    let nonces = DPoPNonces()
    /// The server's clock: from the profile's stored offset, then from each answer's `Date` header.
    let clock: ServerClock

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation, logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
        clock = ServerClock(offset: connection.settings.clockOffset)
    }

    /// A token endpoint client sharing this service's nonces and server clock.
    var tokenClient: OAuthTokenClient { connection.tokenClient(nonces: nonces, clock: clock) }

    /// Stores the server's clock offset when its answers showed one other than the profile holds (for the next
    /// process's proofs and `keymgr status`). A failure to store it loses nothing but that.
    func rememberClock() {
        guard abs(clock.offset - connection.settings.clockOffset) >= ServerClock.threshold else { return }
        do {
            try manager.recordServerClockOffset(name: serverName, offset: clock.offset)
        } catch {
            logger.debug("could not store the server's clock offset", metadata: ["error": .string("\(error)")])
        }
    }

    var serverName: String { connection.serverName }
    var bound: Bool { connection.settings.tokenBinding == .bound }

    /// The client credentials of the user's registration.
    func credentials(userId: String) throws -> OAuthClientCredentials {
        guard let client = try manager.clientState(userId: userId, serverName: serverName) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no client registration at this server: "
                + "run `keymgr dcr register --user \(userId) --software-id TEMPLATE` first")
        }
        return OAuthClientCredentials(clientId: client.registration.clientId, clientSecret: client.secrets.clientSecret,
                                      authMethod: client.registration.tokenEndpointAuthMethod)
    }

    /// Proofs by `key` whose `iat` is the server's time, as far as its answers have shown it.
    func proofMaker(_ key: DPoPKey?) -> DPoPProofMaker? {
        guard let key else { return nil }
        let clock = clock
        return { htm, htu, nonce, accessToken in
            try key.proof(htm: htm, htu: htu, nonce: nonce, accessToken: accessToken, at: clock.now())
        }
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
        throw SyncError(.serverRejected, "the server issued \(issued.tokenType) tokens, not DPoP-bound ones, "
            + "although this profile is --bound; nothing was stored. If this server does not support DPoP, choose "
            + "unbound tokens with `keymgr server set … --unbound` and log in again")
    }

    /// Stores a token response obtained elsewhere (RFC 6749 §5.1 JSON). Such tokens are not bound to a key
    /// keymgr holds, so they are stored as unbound; a `--bound` profile refuses Bearer tokens.
    public func importTokens(userId: String, json: Data) throws -> TokenSet {
        try manager.authorize(userId: userId)
        let response: OAuthTokenResponse
        do {
            response = try OAuthTokenResponse.parse(json)
        } catch let failure as TransportError {
            throw SyncError(.badInput, "stdin is not a token response: \(failure.message)")
        }
        try checkBinding(response)
        let clientId = try credentials(userId: userId).clientId
        return try manager.storeTokens(userId: userId, serverName: serverName, clientId: clientId,
                                       issued: response, dpopKey: nil, event: "tokens.imported")
    }

    /// Refreshes the user's tokens now, one process at a time. When no other process holds the lock the token row
    /// is read once, under it. When one does, the revision is read before waiting and compared under the lock, so
    /// when that process refreshed meanwhile, its tokens are the answer and the old refresh token is never spent
    /// again.
    public func refresh(userId: String) async throws -> TokenSet {
        try await refreshed(userId: userId, seen: nil, readSeenBeforeWaiting: true).set
    }

    /// Refreshes the user's tokens, one process at a time. When the stored tokens changed since the caller saw
    /// revision `seen` (another process refreshed while this one waited for the lock), those are used and the
    /// old refresh token is never spent again.
    package func refresh(userId: String, seen: String?) async throws -> TokenSet {
        try await refreshed(userId: userId, seen: seen).set
    }

    /// `refresh`, with the access token the tokens now hold. Under the lock the token row is read once (set,
    /// strings and DPoP key together) and the registration row once. With `readSeenBeforeWaiting` (and no `seen`),
    /// the revision to compare is read only if another process holds the lock, before waiting for it.
    private func refreshed(userId: String, seen: String?,
                           readSeenBeforeWaiting: Bool = false) async throws -> (set: TokenSet, accessToken: String?) {
        try manager.authorize(userId: userId)
        var seen = seen
        let lock = try await TokenRefreshLock.acquire(home: home, userId: userId, serverName: serverName) {
            guard readSeenBeforeWaiting, seen == nil else { return }
            guard let set = try manager.tokenSet(userId: userId, serverName: serverName) else {
                throw SyncError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
            }
            seen = set.revision
        }
        defer { lock.release() }
        // Not `releasing`: `accessToken` checked before it asked for a refresh; `token refresh` prints no token.
        guard let current = try manager.tokenState(userId: userId, serverName: serverName, withDPoPKey: bound,
                                                   releasing: false) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
        }
        if let seen, current.set.revision != seen {
            logger.debug("another process refreshed these tokens", metadata: ["user": .string(userId)])
            return (current.set, current.secrets.accessToken)
        }
        guard let refreshToken = current.secrets.refreshToken else {
            throw SyncError(.unAuthorize, "\(userId) has no refresh token: run `keymgr login --user \(userId)` again")
        }
        // A refresh spends the refresh token (rotation): one whose answer `checkBinding` would refuse is never sent.
        if bound, current.set.tokenType != "DPoP" || current.dpopKey == nil {
            throw SyncError(.serverRejected, "\(userId)'s tokens are \(current.set.tokenType) tokens bound to no DPoP key, "
                + "but this profile is --bound, which takes only DPoP-bound tokens; no refresh was sent. Log in again: "
                + "run `keymgr login --user \(userId)` (or set the profile back with `keymgr server set … --unbound`)")
        }
        // The profile's choice, not the stored tokens', decides whether a proof goes along (see `requestKey`).
        let key = bound ? current.dpopKey : nil
        let client = try credentials(userId: userId)
        let response: OAuthTokenResponse
        do {
            defer { rememberClock() }
            response = try await tokenClient.refresh(
                tokenEndpoint: try connection.tokenEndpoint, refreshToken: refreshToken, client: client, scope: nil,
                dpop: proofMaker(key))
        } catch let failure as TransportError {
            throw try explain(failure, userId: userId, refreshing: true)
        }
        do {
            try checkBinding(response)
            let stored = try manager.storeTokens(userId: userId, serverName: serverName, clientId: client.clientId,
                                                 issued: response, dpopKey: response.tokenType == "DPoP" ? key : nil,
                                                 event: "tokens.refreshed", serverClockOffset: clock.offset)
            return (stored, response.accessToken)
        } catch {
            // The server has spent the old refresh token (RFC 6749 §6): the answer it gave instead is revoked there,
            // and the old tokens go too, so nothing the server retired is ever handed out again.
            let revoked = await revokeIssued(response, client: client)
            _ = try? manager.discardTokens(userId: userId, serverName: serverName, reason: "refresh answer refused")
            throw Self.refused(error, revoked: revoked, after: "the refresh", then: "\(userId)'s old tokens were discarded "
                + "here, as the server spent their refresh token: run `keymgr login --user \(userId)` again")
        }
    }

    /// What `revokeIssued` managed: everything, nothing because the profile has no revocation endpoint, or a failure.
    enum IssuedRevocation {
        case revoked
        case noEndpoint
        case failed(String)
    }

    /// Revokes tokens the server issued and keymgr refused (RFC 7009, with the client's credentials): the refresh
    /// token first (which takes its access tokens with it at most servers), then the access token.
    func revokeIssued(_ issued: OAuthTokenResponse, client: OAuthClientCredentials) async -> IssuedRevocation {
        guard let endpoint = connection.settings.revocationEndpoint else { return .noEndpoint }
        let tokens = tokenClient
        do {
            if let refresh = issued.refreshToken {
                try await tokens.revoke(endpoint: endpoint, token: refresh, hint: "refresh_token", client: client)
            }
            try await tokens.revoke(endpoint: endpoint, token: issued.accessToken, hint: "access_token", client: client)
            return .revoked
        } catch let failure as TransportError {
            return .failed(failure.message)
        } catch {
            return .failed(String(describing: error))
        }
    }

    /// A refused token answer, with what became of the tokens at the server in the message.
    static func refused(_ error: any Error, revoked: IssuedRevocation, after what: String, then: String? = nil) -> any Error {
        let outcome: String
        switch revoked {
        case .revoked:
            outcome = "the tokens the server issued were revoked there"
        case .noEndpoint:
            outcome = "the tokens the server issued could not be revoked there (the profile has no revocation endpoint: "
                + "give `keymgr server set … --revocation-endpoint URL`); they stay valid at the server until they expire"
        case .failed(let why):
            outcome = "revoking the tokens the server issued failed (\(why)); they stay valid at the server until they expire"
        }
        let failure = error as? any KeymgrFailure
        let reason = failure?.message ?? String(describing: error)
        return SyncError(failure?.code ?? .failure, "\(reason). After \(what), \(outcome)" + (then.map { "; \($0)" } ?? ""))
    }

    /// An access token valid for more than `minTTL` seconds, refreshing first (single-flight) when needed. Without
    /// a refresh the token row is read once.
    public func accessToken(userId: String, minTTL: TimeInterval) async throws -> (token: String, set: TokenSet) {
        try manager.authorize(userId: userId)
        guard let state = try manager.tokenState(userId: userId, serverName: serverName, withDPoPKey: false) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
        }
        var (set, token) = (state.set, state.secrets.accessToken)
        // `expiresAt` is on the server's clock (see `storeTokens`): compared with the server's time now.
        if let expiresAt = set.expiresAt, expiresAt.timeIntervalSince(clock.now()) <= minTTL {
            (set, token) = try await refreshed(userId: userId, seen: set.revision)
        }
        guard let token else {
            throw SyncError(.unAuthorize, "\(userId) has no access token: run `keymgr login --user \(userId)` again")
        }
        return (token, set)
    }

    /// Revokes the refresh token (which takes its access tokens with it) and the access token at the server
    /// (RFC 7009), then discards the tokens and the DPoP key here.
    /// `confirm` is asked first, with the tokens about to be revoked (a user with none fails before it is asked), and
    /// may throw to stop; it runs before the user's lock is taken, so a person's slow answer holds no lock.
    public func revoke(userId: String, confirm: @Sendable (TokenSet) throws -> Void = { _ in }) async throws {
        try manager.authorize(userId: userId)
        guard let set = try manager.tokenSet(userId: userId, serverName: serverName) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no tokens to revoke at the server profile \(serverName)")
        }
        try confirm(set)
        try await TokenRefreshLock.holding(home: home, userId: userId, serverName: serverName) {
            try await revokeHoldingLock(userId: userId)
        }
    }

    private func revokeHoldingLock(userId: String) async throws {
        guard let secrets = try manager.tokenState(userId: userId, serverName: serverName, withDPoPKey: false)?.secrets else {
            throw SyncError(.clientNotRegistered, "\(userId) has no tokens to revoke")
        }
        let client = try credentials(userId: userId)
        let endpoint = try connection.endpoint(connection.settings.revocationEndpoint, "revocation endpoint", flag: "--revocation-endpoint")
        let tokens = tokenClient
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
        try manager.authorize(userId: userId)
        guard let key = try manager.dpopKey(userId: userId, serverName: serverName) else {
            throw SyncError(.clientNotRegistered, "\(userId) has no DPoP key: the tokens are unbound or missing "
                + "(run `keymgr login --user \(userId)` with a --bound profile)")
        }
        return try key.proof(htm: htm, htu: htu, nonce: nonce, accessToken: accessToken, at: clock.now())
    }

    /// Calls a protected resource with the user's access token (DPoP with nonce retry, or Bearer).
    package func callResource(userId: String, method: String, url: URL) async throws -> HTTPResponse {
        try manager.authorize(userId: userId)
        let (token, set) = try await accessToken(userId: userId, minTTL: 60)
        let key = try requestKey(userId: userId)
        return try await tokenClient.resource(method: method, url: url, accessToken: token, tokenType: set.tokenType,
                                              dpop: proofMaker(key))
    }

    /// A token endpoint failure in terms of what to do next; `invalid_grant` discards the tokens and DPoP key.
    func explain(_ failure: TransportError, userId: String, refreshing: Bool) throws -> any Error {
        switch failure.oauthError {
        case .invalidGrant where refreshing:
            try manager.discardTokens(userId: userId, serverName: serverName, reason: "invalid_grant")
            return SyncError(.unAuthorize, "the server no longer accepts \(userId)'s refresh token; the tokens and DPoP key "
                + "were discarded: run `keymgr login --user \(userId)` again")
        case .invalidClient:
            return SyncError(.unAuthorize, "the server no longer knows \(userId)'s client (invalid_client): "
                + "run `keymgr dcr delete --user \(userId)` and `keymgr dcr register --user \(userId) …` again")
        case .invalidDPoPProof where !bound:
            return SyncError(.config, "this server requires DPoP-bound tokens: set the profile to --bound "
                + "(`keymgr server set … --bound`)")
        default:
            return failure
        }
    }

}
