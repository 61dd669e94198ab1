import Foundation
import KeymgrCore

/// Who hands out a DPoP nonce: the authorization server and the resource server keep separate ones,
/// as two real servers would.
enum NonceIssuer: String, Sendable {
    case authorizationServer
    case resourceServer
}

/// The authorization server's in-memory state: server nonces, seen DPoP `jti`s, armed faults, the
/// base URL it learned once it listened.
actor OAuthState {
    private struct ArmedFault {
        var fault: OAuthFault
        var remaining: Int?
    }

    private struct NoncePair {
        var current: String
        var previous: String?
        var issuedAt: Date
    }

    private var faults: [OAuthEndpoint: [ArmedFault]] = [:]
    private var nonces: [NonceIssuer: NoncePair] = [:]
    /// `jti` → when it may be forgotten (its proof is too old to be accepted by then).
    private var seenJTIs: [String: Date] = [:]
    private(set) var baseURL = ""

    func setBaseURL(_ url: String) { baseURL = url }

    // MARK: faults

    func setFault(_ fault: OAuthFault, endpoint: OAuthEndpoint, count: Int?) {
        var armed = faults[endpoint, default: []].filter { $0.fault.name != fault.name }
        // One outage at a time per endpoint: a new one replaces the old.
        if fault.isOutage { armed.removeAll { $0.fault.isOutage } }
        armed.append(ArmedFault(fault: fault, remaining: count))
        faults[endpoint] = armed
    }

    func clearFaults(endpoint: OAuthEndpoint?) {
        if let endpoint { faults[endpoint] = nil } else { faults.removeAll() }
    }

    func currentFaults() -> [OAuthEndpoint: [OAuthFault]] { faults.mapValues { $0.map(\.fault) } }

    /// The faults that apply to this request on `endpoint`, each counted as used.
    func takeFaults(_ endpoint: OAuthEndpoint) -> OAuthFaultSet {
        guard var armed = faults[endpoint] else { return OAuthFaultSet() }
        var set = OAuthFaultSet()
        for index in armed.indices {
            if armed[index].fault.isOutage { set.outage = armed[index].fault } else { set.quirks.append(armed[index].fault) }
            if let remaining = armed[index].remaining { armed[index].remaining = remaining - 1 }
        }
        armed.removeAll { ($0.remaining ?? 1) <= 0 }
        faults[endpoint] = armed.isEmpty ? nil : armed
        return set
    }

    // MARK: nonces

    /// The current nonce of `issuer`, made (or rotated, keeping the previous one valid) when due.
    func nonce(_ issuer: NonceIssuer, now: Date, lifetime: TimeInterval) throws -> String {
        if let pair = nonces[issuer], now.timeIntervalSince(pair.issuedAt) < lifetime { return pair.current }
        return try rotateNonce(issuer, now: now)
    }

    /// Issues a new current nonce; the one it replaces stays valid until the next rotation.
    @discardableResult
    func rotateNonce(_ issuer: NonceIssuer, now: Date) throws -> String {
        let fresh = try randomToken(bytes: 16)
        nonces[issuer] = NoncePair(current: fresh, previous: nonces[issuer]?.current, issuedAt: now)
        return fresh
    }

    /// Whether `nonce` is the current or the previous nonce of `issuer`, still within its lifetime.
    func isValidNonce(_ nonce: String, _ issuer: NonceIssuer, now: Date, lifetime: TimeInterval) -> Bool {
        guard let pair = nonces[issuer] else { return false }
        if constantTimeEqual(nonce, pair.current) { return now.timeIntervalSince(pair.issuedAt) < lifetime * 2 }
        if let previous = pair.previous, constantTimeEqual(nonce, previous) {
            return now.timeIntervalSince(pair.issuedAt) < lifetime
        }
        return false
    }

    // MARK: jti

    /// Records `jti`; false when it was seen within the window (a replayed proof).
    func useJTI(_ jti: String, now: Date, keepUntil: Date) -> Bool {
        seenJTIs = seenJTIs.filter { $0.value > now }
        guard seenJTIs[jti] == nil else { return false }
        seenJTIs[jti] = keepUntil
        return true
    }
}
