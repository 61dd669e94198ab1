import Foundation
import Storage

/// The agent's denials, coalesced per uid (`DenialTally`, W7): a flood from one uid costs at most one audit entry a
/// minute, and never a step of a TPM store's rollback counter.
extension KeyManager {
    /// Writes the denial now (with those counted before it) when `uid`'s last written denial is a minute old or
    /// more, else only counts it. A tally that cannot be opened does not hide the denial: it is written as it comes.
    func recordCoalescedDenial(uid: UInt32, operation: String, reason: String, target: String?) throws {
        let at = now()
        guard var tally = try? DenialTally.locked(home: store.home.url) else {
            return try appendAuditOnly([denialEvent(.init(actor: actor, operation: operation, reason: reason,
                                                          target: target, count: 1, since: at), at: at)])
        }
        defer { tally.close() }
        guard let due = tally.note(uid: uid, at: at, actor: actor, operation: operation, reason: reason, target: target) else {
            return try tally.save()
        }
        // Written before the tally is saved: a write that fails leaves the count to the next denial.
        try appendAuditOnly([denialEvent(due, at: at)])
        try tally.save()
    }

    /// Writes every denial count still waiting in the tally, whatever its age: for an administrator reading the log
    /// (`audit`, `audit verify`), who should see every denial so far. Nothing waits: nothing is written.
    public func flushDenials() throws {
        let path = store.home.url.appendingPathComponent(DenialTally.fileName).path
        var info = stat()
        guard stat(path, &info) == 0, info.st_size > 2 else { return }
        var tally = try DenialTally.locked(home: store.home.url)
        defer { tally.close() }
        guard tally.hasPending else { return }
        let at = now()
        let due = tally.takePending(at: at)
        try appendAuditOnly(due.map { denialEvent($0, at: at) })
        try tally.save()
    }

    /// The `agent.denied` entry for `due`, in the denied caller's name.
    private func denialEvent(_ due: DenialTally.Due, at: Date) -> NewAuditEvent {
        var details: [String: JSONValue] = [
            "operation": .string(due.operation), "reason": .string(due.reason),
            "target": due.target.map(JSONValue.string) ?? .null, "count": .int(Int64(due.count)),
        ]
        if due.count > 1 { details["since"] = .string(ISOTime.string(from: due.since)) }
        return NewAuditEvent(at: at, event: "agent.denied", actor: due.actor, details: JSONValue.object(details).canonicalJSON())
    }
}
