import Foundation
import Glibc
import Storage

/// What `keymgr audit archive` did.
public struct AuditArchiveSummary: Sendable, Equatable {
    /// How many entries the file holds (and the store no longer does).
    public let entries: Int
    public let firstSeq: Int64
    public let lastSeq: Int64
    /// The hash of the last archived entry: the store's log continues from it.
    public let lastHash: String
}

/// Bounded logs: `audit archive --before DATE --output FILE` writes the entries before DATE, with their chain, to a
/// file `audit verify --input FILE` checks, then removes them from the store, leaving the newest of them as the log's
/// base (MAC'd) so the chain still verifies from there. An administrator's act (the whole store in scope), audited.
///
/// The file is JSON lines: a header `{"format":"keymgr-audit-archive-v1","deviceId","after":{"seq","hash"},
/// "before","entries"}` (`after`: where the previous archive ended, seq 0 and the genesis hash for the first), then
/// one entry a line `{"seq","at","event","userId","kid","actor","details","prevHash","hash","mac"}`, `details` the
/// exact text the hash covers.
extension KeyManager {
    static let archiveFormat = "keymgr-audit-archive-v1"

    /// Archives the entries written before `before` to `descriptor`, a new, empty file open for writing that the
    /// caller created (mode 0600) and calls `name` in messages, then removes them from the store. Nothing before
    /// `before`: nothing is written, and the file stays empty (its creator removes it). A failed write leaves it
    /// empty too.
    /// - Throws: `denied` for a caller whose scope does not cover every user; `tampered` for a log that does not
    ///   verify (nothing is archived).
    public func archiveAudit(before: Date, to descriptor: Int32, name path: String) throws -> AuditArchiveSummary? {
        if let scope = context.scope, !scope.coversAllUsers {
            throw denied(scope, target: "the audit log", reason: "\(scope.rule) does not let \(scope.caller) archive the "
                + "audit log: it is an administrator's act (a rule with for = \"*\")")
        }
        let keys = integrity.auditKeys
        // One snapshot: the entries, the base they continue and a keyed check of the chain they belong to.
        let read = try Self.mapped {
            try store.read { reader -> (base: AuditBase?, entries: [AuditEventRecord], bad: AuditChainReport.Break?) in
                let bad = try reader.verifyAuditChain(keys: keys).firstBad
                guard let last = try reader.newestAuditSeq(before: before) else { return (nil, [], bad) }
                var entries: [AuditEventRecord] = []
                try reader.forEachAuditEvent(AuditQuery()) { entry in if entry.seq <= last { entries.append(entry) } }
                return (try reader.auditBase(), entries, bad)
            }
        }
        if let bad = read.bad {
            throw KeyManagerError(.tampered, "the audit log is broken at entry \(bad.seq) (\(bad.reason)): nothing was "
                + "archived; run `keymgr audit verify` and restore the store from a backup")
        }
        guard let first = read.entries.first, let last = read.entries.last else { return nil }
        try writeArchive(read.entries, after: read.base, before: before, to: descriptor, name: path)
        let removed = try write { writer -> Int in
            let removed = try writer.archiveAudit(through: last.seq, lastHash: last.hash, keys: keys)
            try writer.appendAudit(auditEvent("audit.archived", details: [
                "before": .string(ISOTime.string(from: before)), "entries": .int(Int64(removed)),
                "firstSeq": .int(first.seq), "lastSeq": .int(last.seq), "lastHash": .string(last.hash),
                "file": .string(path),
            ]))
            return removed
        }
        store.checkpointDestroyedData()
        return AuditArchiveSummary(entries: removed, firstSeq: first.seq, lastSeq: last.seq, lastHash: last.hash)
    }

    /// Writes the archive file and syncs it (and its directory, when its name is a path here) before anything is
    /// removed from the store; on failure it is emptied again.
    private func writeArchive(_ entries: [AuditEventRecord], after base: AuditBase?, before: Date, to descriptor: Int32,
                              name path: String) throws {
        var text = JSONValue.object([
            "format": .string(Self.archiveFormat), "deviceId": .string(deviceId),
            "after": .object(["seq": .int(base?.seq ?? 0), "hash": .string(base?.hash ?? String(repeating: "0", count: 64))]),
            "before": .string(ISOTime.string(from: before)), "entries": .int(Int64(entries.count)),
        ]).canonicalJSON() + "\n"
        for entry in entries {
            text += JSONValue.object([
                "seq": .int(entry.seq), "at": .string(entry.at), "event": .string(entry.event),
                "userId": entry.userId.map(JSONValue.string) ?? .null, "kid": entry.kid.map(JSONValue.string) ?? .null,
                "actor": .string(entry.actor), "details": .string(entry.details), "prevHash": .string(entry.prevHash),
                "hash": .string(entry.hash), "mac": entry.mac.map(JSONValue.string) ?? .null,
            ]).canonicalJSON() + "\n"
        }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let result = bytes[written...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else {
                let reason = String(cString: strerror(errno))
                _ = ftruncate(descriptor, 0)
                throw KeyManagerError(.failure, "cannot write \(path): \(reason); nothing was archived")
            }
            written += result
        }
        guard fsync(descriptor) == 0 else {
            let reason = String(cString: strerror(errno))
            _ = ftruncate(descriptor, 0)
            throw KeyManagerError(.failure, "cannot sync \(path): \(reason); nothing was archived")
        }
        // Through the agent the name is the caller's, perhaps relative to a directory the agent cannot see: the
        // directory is synced only when the name leads to this very file here.
        var opened = stat()
        var named = stat()
        if path.hasPrefix("/"), fstat(descriptor, &opened) == 0, stat(path, &named) == 0,
           opened.st_dev == named.st_dev, opened.st_ino == named.st_ino {
            MasterKey.syncDirectory(of: path)
        }
    }

    /// Checks an archive file offline (`audit verify --input FILE`): its header, then the SHA-256 chain from the
    /// header's `after` on, naming every missing, altered or replaced entry.
    /// - Throws: `badInput` (65) for a file that is not a keymgr archive.
    public static func verifyArchive(_ text: String) throws -> AuditCopyReport {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        func object(_ line: Substring, _ number: Int) throws -> [String: Any] {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw KeyManagerError(.badInput, "line \(number) of the archive is not a JSON object: it is no keymgr "
                    + "archive, or it was damaged")
            }
            return object
        }
        guard let headerLine = lines.first, case let header = try object(headerLine, 1),
              header["format"] as? String == archiveFormat,
              let after = header["after"] as? [String: Any], let afterSeq = (after["seq"] as? NSNumber)?.int64Value,
              let afterHash = after["hash"] as? String else {
            throw KeyManagerError(.badInput, "the file is not a keymgr audit archive (its first line is no "
                + "\(archiveFormat) header): give a file `keymgr audit archive` wrote")
        }
        var records: [AuditEventRecord] = []
        for (index, line) in lines.dropFirst().enumerated() {
            let entry = try object(line, index + 2)
            guard let seq = (entry["seq"] as? NSNumber)?.int64Value, let at = entry["at"] as? String,
                  let event = entry["event"] as? String, let actor = entry["actor"] as? String,
                  let details = entry["details"] as? String, let prevHash = entry["prevHash"] as? String,
                  let hash = entry["hash"] as? String else {
                throw KeyManagerError(.badInput, "line \(index + 2) of the archive is not an audit entry (a field is missing)")
            }
            records.append(AuditEventRecord(seq: seq, at: at, event: event, userId: entry["userId"] as? String,
                                            kid: entry["kid"] as? String, actor: actor, details: details,
                                            prevHash: prevHash, hash: hash))
        }
        var chain = checkChain(records, deviceId: header["deviceId"] as? String, startingAfter: (afterSeq, afterHash))
        if let count = (header["entries"] as? NSNumber)?.intValue, count != records.count {
            chain.problems.append(.init(seq: chain.lastSeq + 1, reason: "the archive's header says it holds \(count) entries, "
                + "but \(records.count) are there: entries were removed from its end or added"))
        }
        return AuditCopyReport(chains: [chain])
    }
}
