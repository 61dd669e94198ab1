import Foundation
import Storage

/// A copy of the audit log checked offline, without the store or its master key: the journal's copy (`keymgr audit
/// verify --journal FILE`, from `journalctl -o json`) or an archive (`audit verify --input FILE`). The SHA-256 chain
/// is recomputed: an altered entry (its fields no longer give its hash), a missing entry (a gap in the seqs) and a
/// replaced one (an entry whose prevHash is not the hash of the entry before it) are named. The keyed chain needs the
/// master key and is checked only in the store (`audit verify`).
public struct AuditCopyReport: Sendable, Equatable {
    /// One store's entries in the copy.
    public struct Chain: Sendable, Equatable {
        /// The store's device id (nil when the copy does not say).
        public var deviceId: String?
        public var firstSeq: Int64
        public var lastSeq: Int64
        public var entries: Int
        public var problems: [Problem]
    }

    /// Something wrong at one entry.
    public struct Problem: Sendable, Equatable {
        public var seq: Int64
        public var reason: String
    }

    public var chains: [Chain]

    /// True when every chain holds.
    public var isIntact: Bool { chains.allSatisfy { $0.problems.isEmpty } }
}

extension KeyManager {
    /// Checks the keymgr entries of a `journalctl -o json` export (one JSON object a line; other programs' lines are
    /// skipped), each store's chain on its own (`KEYMGR_DEVICE`).
    /// - Throws: `badInput` (65) for a line that is not JSON, or a keymgr entry missing a field the check needs.
    public static func verifyJournalExport(_ text: String) throws -> AuditCopyReport {
        var byDevice: [String: [AuditEventRecord]] = [:]
        var order: [String] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw KeyManagerError(.badInput, "line \(number + 1) of the journal export is not a JSON object: "
                    + "export with `journalctl -o json` (one entry a line)")
            }
            guard object["KEYMGR_SEQ"] != nil else { continue }
            func field(_ name: String) -> String? {
                switch object[name] {
                case let text as String: return text
                case let bytes as [Any]:  // journalctl's form for a value that is not plain text
                    let numbers = bytes.compactMap { ($0 as? NSNumber)?.uint8Value }
                    return numbers.count == bytes.count ? String(decoding: numbers, as: UTF8.self) : nil
                default: return nil
                }
            }
            func required(_ name: String) throws -> String {
                guard let value = field(name) else {
                    throw KeyManagerError(.badInput, "line \(number + 1) of the journal export is a keymgr entry without "
                        + "\(name): it was not written by this keymgr, or the export was cut")
                }
                return value
            }
            guard let seq = Int64(try required("KEYMGR_SEQ")) else {
                throw KeyManagerError(.badInput, "line \(number + 1) of the journal export has a KEYMGR_SEQ that is no number")
            }
            let record = AuditEventRecord(seq: seq, at: try required("KEYMGR_AT"), event: try required("KEYMGR_EVENT"),
                                          userId: field("KEYMGR_USER"), kid: field("KEYMGR_KID"),
                                          actor: try required("KEYMGR_ACTOR"), details: try required("KEYMGR_DETAILS"),
                                          prevHash: try required("KEYMGR_PREV_HASH"), hash: try required("KEYMGR_HASH"))
            let device = field("KEYMGR_DEVICE") ?? ""
            if byDevice[device] == nil { order.append(device) }
            byDevice[device, default: []].append(record)
        }
        return AuditCopyReport(chains: order.map { device in
            checkChain(byDevice[device] ?? [], deviceId: device.isEmpty ? nil : device, startingAfter: nil)
        })
    }

    /// Checks one store's entries (in any order): hashes, links and gaps. `startingAfter`: the hash the first entry
    /// must follow when the copy says where it starts (an archive's anchor); nil to accept any start but the genesis
    /// rule for entry 1.
    static func checkChain(_ records: [AuditEventRecord], deviceId: String?,
                           startingAfter: (seq: Int64, hash: String)?) -> AuditCopyReport.Chain {
        var problems: [AuditCopyReport.Problem] = []
        var bySeq: [Int64: AuditEventRecord] = [:]
        for record in records {
            if let seen = bySeq[record.seq] {
                // The same entry sent twice is one entry; two different ones under one seq are not.
                if seen != record {
                    problems.append(.init(seq: record.seq, reason: "entry \(record.seq) appears twice with different "
                        + "contents: one of them was edited or forged"))
                }
                continue
            }
            bySeq[record.seq] = record
        }
        let sorted = bySeq.values.sorted { $0.seq < $1.seq }
        var previous: AuditEventRecord?
        if let anchor = startingAfter, let first = sorted.first {
            if first.seq != anchor.seq + 1 {
                problems.append(.init(seq: anchor.seq + 1, reason: "entries \(anchor.seq + 1)–\(first.seq - 1) are missing: "
                    + "the copy starts at entry \(first.seq) but its anchor names entry \(anchor.seq)"))
            } else if first.prevHash != anchor.hash {
                problems.append(.init(seq: first.seq, reason: "entry \(first.seq) does not follow the anchor (its prevHash "
                    + "is not the anchor's hash)"))
            }
        }
        for record in sorted {
            if record.computedHash(digest: SHA256.hash) != record.hash {
                problems.append(.init(seq: record.seq, reason: "entry \(record.seq) (\(record.event)) was altered: its "
                    + "fields do not give its hash"))
            }
            if let previous {
                if record.seq > previous.seq + 1 {
                    let range = record.seq - 1 == previous.seq + 1 ? "entry \(previous.seq + 1) is"
                        : "entries \(previous.seq + 1)–\(record.seq - 1) are"
                    problems.append(.init(seq: previous.seq + 1, reason: "\(range) missing: removed from the copy"))
                } else if record.prevHash != previous.hash {
                    problems.append(.init(seq: record.seq, reason: "entry \(record.seq) does not follow entry \(previous.seq) "
                        + "(its prevHash is not that entry's hash): entry \(previous.seq) was replaced or edited"))
                }
            } else if startingAfter == nil, record.seq == 1, record.prevHash != String(repeating: "0", count: 64) {
                problems.append(.init(seq: 1, reason: "entry 1 does not start the chain (its prevHash is not the genesis "
                    + "hash)"))
            }
            previous = record
        }
        return AuditCopyReport.Chain(deviceId: deviceId, firstSeq: sorted.first?.seq ?? 0, lastSeq: sorted.last?.seq ?? 0,
                                     entries: sorted.count, problems: problems)
    }
}
