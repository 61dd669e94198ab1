import Foundation

/// Where an unfinished journey stands: kept server-side under its opaque `authId`.
struct JourneySession: Sendable {
    enum Step: Sendable {
        /// Waiting for NameCallback (and, for binding, PasswordCallback).
        case credentials
        /// Waiting for the DeviceBindingCallback or DeviceSigningVerifierCallback answer.
        case device(username: String, challenge: String)
    }

    var journey: Journey
    var realm: Realm
    var step: Step
    var expiresAt: Date
}

/// The server's mutable, in-memory state: faults, unfinished journeys, the request journal.
actor ServerState {
    private struct ArmedFault {
        var fault: Fault
        /// How many more requests it applies to; nil = until cleared.
        var remaining: Int?
    }

    private var faults: [String: ArmedFault] = [:]
    private var sessions: [String: JourneySession] = [:]
    private var journal: [RecordedRequest] = []
    private let journalLimit = 1000
    private(set) var lastActivity = Date()

    // MARK: faults

    func setFault(_ fault: Fault, user: String, count: Int?) {
        faults[user] = ArmedFault(fault: fault, remaining: count)
    }

    func clearFault(user: String) { faults[user] = nil }

    func clearFaults() { faults.removeAll() }

    func currentFaults() -> [String: Fault] { faults.mapValues(\.fault) }

    /// The fault armed for `user` that applies to this request, counting it as used.
    func takeFault(user: String, isListing: Bool) -> Fault? {
        guard var armed = faults[user] else { return nil }
        if armed.fault == .endlessPaging, !isListing { return nil }
        if let remaining = armed.remaining {
            if remaining <= 1 { faults[user] = nil } else { armed.remaining = remaining - 1; faults[user] = armed }
        }
        return armed.fault
    }

    // MARK: journeys

    func createSession(_ session: JourneySession, now: Date) -> String {
        sessions = sessions.filter { $0.value.expiresAt > now }
        let authId = randomToken(bytes: 32)
        sessions[authId] = session
        return authId
    }

    /// Removes and returns the session: every answer either ends the journey or opens a new `authId`.
    func takeSession(_ authId: String, now: Date) -> JourneySession? {
        guard let session = sessions.removeValue(forKey: authId), session.expiresAt > now else { return nil }
        return session
    }

    // MARK: journal

    func record(_ request: RecordedRequest, at date: Date) {
        lastActivity = date
        journal.append(request)
        if journal.count > journalLimit { journal.removeFirst(journal.count - journalLimit) }
    }

    func recordedRequests() -> [RecordedRequest] { journal }

    func clearRecordedRequests() { journal.removeAll() }
}

/// Random bytes from the system's CSPRNG (getrandom on Linux).
func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
}

/// A random opaque token, base64url without padding.
func randomToken(bytes count: Int) -> String {
    base64URL(randomBytes(count))
}

/// Base64url without padding (RFC 4648 §5), for opaque ids and cookies.
func base64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// Decodes base64url with or without padding.
func base64URLDecode(_ text: String) -> [UInt8]? {
    var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64.append("=") }
    return Data(base64Encoded: base64).map { Array($0) }
}
