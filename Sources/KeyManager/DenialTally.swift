import Foundation
import Glibc

/// The agent's denials, coalesced per calling uid (W7): the first denial of a uid is written to the audit log at once;
/// further ones within `window` of the last entry written for that uid are only counted here, and written as one
/// `agent.denied` entry with their `count` when the uid is next denied after the window, or when an administrator
/// reads the log. A flood of denials from one uid so costs at most one audit entry a minute.
///
/// The counts wait in `denials.tally` in the store's home (0600, the agent's own), read and rewritten under an
/// `flock` of the file, which is held while the entry is written so that two workers never both write (or both
/// skip) one uid's entry. The file names uids, operations and reasons, never a secret.
struct DenialTally {
    /// How long after a uid's last written denial further ones are only counted.
    static let window: TimeInterval = 60
    static let fileName = "denials.tally"

    /// One uid's state.
    struct Entry: Codable, Equatable {
        /// When the last entry for this uid was written (seconds since 1970).
        var lastWritten: Double
        /// Denials counted since, not yet in the log.
        var pending: Int
        /// When the first of them happened.
        var firstPending: Double?
        /// The newest of them, as the entry that writes them names it.
        var actor: String
        var operation: String
        var reason: String
        var target: String?
    }

    /// A coalesced denial due in the log: the newest one's words and how many it stands for.
    struct Due {
        let actor: String
        let operation: String
        let reason: String
        let target: String?
        let count: Int
        let since: Date
    }

    private let descriptor: Int32
    private(set) var entries: [String: Entry]

    /// Opens and locks the tally in `home` (waiting for another worker that holds it), creating it when absent.
    /// - Throws: when the file cannot be opened (the caller writes the denial as it comes instead).
    static func locked(home: URL) throws -> DenialTally {
        let path = home.appendingPathComponent(fileName).path
        let descriptor = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw KeyManagerError(.failure, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        while flock(descriptor, LOCK_EX) != 0 && errno == EINTR {}
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = pread(descriptor, &chunk, chunk.count, off_t(bytes.count))
            if got <= 0 { break }
            bytes.append(contentsOf: chunk.prefix(got))
        }
        // A tally that does not parse (a crash mid-rewrite) is started afresh: the next denial of each uid is written.
        let entries = (try? JSONDecoder().decode([String: Entry].self, from: Data(bytes))) ?? [:]
        return DenialTally(descriptor: descriptor, entries: entries)
    }

    private init(descriptor: Int32, entries: [String: Entry]) {
        self.descriptor = descriptor
        self.entries = entries
    }

    /// Counts a denial of `uid` at `at`: what to write now (itself, with any counted before it), or nil when the
    /// uid's last entry is less than `window` old and this one is only counted.
    mutating func note(uid: UInt32, at: Date, actor: String, operation: String, reason: String,
                       target: String?) -> Due? {
        let key = String(uid)
        let now = at.timeIntervalSince1970
        if var entry = entries[key], now - entry.lastWritten < Self.window, now >= entry.lastWritten {
            entry.pending += 1
            entry.firstPending = entry.firstPending ?? now
            entry.actor = actor
            entry.operation = operation
            entry.reason = reason
            entry.target = target
            entries[key] = entry
            return nil
        }
        let earlier = entries[key]
        let count = (earlier?.pending ?? 0) + 1
        let since = earlier?.firstPending ?? now
        entries[key] = Entry(lastWritten: now, pending: 0, firstPending: nil, actor: actor, operation: operation,
                             reason: reason, target: target)
        return Due(actor: actor, operation: operation, reason: reason, target: target, count: count,
                   since: Date(timeIntervalSince1970: since))
    }

    /// Every count still waiting, emptied (to be written now, whatever the window), uids in order.
    mutating func takePending(at: Date) -> [Due] {
        var due: [Due] = []
        for key in entries.keys.sorted() {
            guard var entry = entries[key], entry.pending > 0 else { continue }
            due.append(Due(actor: entry.actor, operation: entry.operation, reason: entry.reason, target: entry.target,
                           count: entry.pending, since: Date(timeIntervalSince1970: entry.firstPending ?? entry.lastWritten)))
            entry.pending = 0
            entry.firstPending = nil
            entry.lastWritten = at.timeIntervalSince1970
            entries[key] = entry
        }
        return due
    }

    /// Whether any count waits.
    var hasPending: Bool { entries.values.contains { $0.pending > 0 } }

    /// Writes the tally back (no fsync: a count lost with the power is a count, never a secret or a decision).
    func save() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let bytes = [UInt8](try encoder.encode(entries))
        guard ftruncate(descriptor, 0) == 0,
              bytes.withUnsafeBytes({ pwrite(descriptor, $0.baseAddress, $0.count, 0) }) == bytes.count else {
            throw KeyManagerError(.failure, "cannot write the denial tally: \(String(cString: strerror(errno)))")
        }
    }

    /// Lets the lock go.
    func close() { Glibc.close(descriptor) }
}
