import Foundation
import KeymgrCore

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
    /// The affinity cookie's value set on the first step, which every later step must return.
    var affinity: String = ""
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
    /// `journal`'s entries' numbers, in step with it.
    private var journalNumbers: [Int] = []
    private var nextJournalNumber = 0
    private var openSessions: [String: OpenSession] = [:]
    private var clientErrors: [JourneyClientError] = []
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

    func storeSession(_ session: JourneySession, authId: String, now: Date) {
        sessions = sessions.filter { $0.value.expiresAt > now }
        sessions[authId] = session
    }

    /// Removes and returns the session: every answer either ends the journey or opens a new `authId`.
    func takeSession(_ authId: String, now: Date) -> JourneySession? {
        guard let session = sessions.removeValue(forKey: authId), session.expiresAt > now else { return nil }
        return session
    }

    // MARK: sessions and clientError outcomes

    func openSession(_ tokenId: String, _ session: OpenSession) { openSessions[tokenId] = session }

    /// Ends the session; false when there was none.
    func endSession(_ tokenId: String) -> Bool { openSessions.removeValue(forKey: tokenId) != nil }

    func openSessionCount() -> Int { openSessions.count }

    func record(_ clientError: JourneyClientError) { clientErrors.append(clientError) }

    func recordedClientErrors() -> [JourneyClientError] { clientErrors }

    // MARK: journal

    /// Marks the server busy (a tenant's request: idleness is the whole server's).
    func touch() { lastActivity = Date() }

    /// Records a request as it arrives; the number it returns marks its answer (`answered(_:)`).
    @discardableResult
    func record(_ request: RecordedRequest, at date: Date) -> Int {
        // Idleness (`--idle-exit`) is on the machine's clock: `date` is the server's, which `--clock-offset` moves.
        lastActivity = Date()
        journal.append(request)
        journalNumbers.append(nextJournalNumber)
        nextJournalNumber += 1
        if journal.count > journalLimit {
            journal.removeFirst(journal.count - journalLimit)
            journalNumbers.removeFirst(journalNumbers.count - journalLimit)
        }
        return nextJournalNumber - 1
    }

    /// Stamps the answer time of the request `record` numbered `number`, if it is still in the journal.
    func answered(_ number: Int) {
        guard let index = journalNumbers.lastIndex(of: number) else { return }
        journal[index].answered = Date()
    }

    func recordedRequests() -> [RecordedRequest] { journal }

    func clearRecordedRequests() {
        journal.removeAll()
        journalNumbers.removeAll()
    }
}

/// Random bytes from libcrypto's CSPRNG, through the server's own crypto (`ServerCrypto`).
func randomBytes(_ count: Int) throws -> [UInt8] {
    try ServerCrypto.randomBytes(count: count)
}

/// A random opaque token, base64url without padding.
func randomToken(bytes count: Int) throws -> String {
    Base64URL.encode(try randomBytes(count))
}
