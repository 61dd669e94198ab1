import Foundation
import GRDB
import KeymgrCore

// The queries of `AuditEventRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The event names the log holds (a scan of the whole log: for a name keymgr does not know).
    package func auditEventNames() throws -> Set<String> {
        Set(try String.fetchAll(db, sql: "SELECT DISTINCT event FROM audit_events"))
    }

    /// Whether the log holds an entry of `event` (stops at the first).
    package func auditHasEvent(_ event: String) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM audit_events WHERE event = ?)", arguments: [event]) ?? false
    }

    /// Audit entries matching `query`, in its order.
    package func auditEvents(_ query: AuditQuery = AuditQuery()) throws -> [AuditEventRecord] {
        var entries: [AuditEventRecord] = []
        try forEachAuditEvent(query) { entries.append($0) }
        return entries
    }

    /// Calls `body` with each audit entry matching `query` as SQLite steps through them: memory stays flat however
    /// long the log. With `query.newest`, the log is read from its end (`ORDER BY seq DESC LIMIT`, on the primary
    /// key), so the cost does not grow with the log's length.
    package func forEachAuditEvent(_ query: AuditQuery, _ body: (AuditEventRecord) throws -> Void) throws {
        var conditions: [String] = []
        var arguments = StatementArguments()
        if let userId = query.userId { conditions.append("user_id = ?"); arguments += [userId] }
        if let since = query.since { conditions.append("at >= ?"); arguments += [Timestamp.string(from: since)] }
        if let event = query.event { conditions.append("event = ?"); arguments += [event] }
        var sql = "SELECT * FROM audit_events"
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        if let newest = query.newest {
            sql += " ORDER BY seq DESC LIMIT ?"
            arguments += [max(0, newest)]
            // The newest N, then oldest first among them: SQLite sorts only those N.
            if !query.newestFirst { sql = "SELECT * FROM (\(sql)) ORDER BY seq" }
        } else {
            sql += query.newestFirst ? " ORDER BY seq DESC" : " ORDER BY seq"
        }
        let cursor = try AuditEventRecord.fetchCursor(db, sql: sql, arguments: arguments)
        while let entry = try cursor.next() { try body(entry) }
    }

    /// Recomputes the audit chain from the first entry and reports the first entry that does not hold.
    package func verifyAuditChain() throws -> AuditChainReport {
        let base = try auditBase()
        var expectedPrev = base?.hash ?? AuditChain.genesis
        var checked = 0
        let cursor = try AuditEventRecord.order(AuditEventRecord.Columns.seq).fetchCursor(db)
        while let entry = try cursor.next() {
            if checked == 0, let base, entry.seq != base.seq + 1 {
                return AuditChainReport(checked: 0, firstBad: .init(seq: base.seq + 1, reason: "the log's base (the newest "
                    + "archived entry) is entry \(base.seq), but the log starts at entry \(entry.seq): entries were removed"))
            }
            if entry.prevHash != expectedPrev {
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq,
                    reason: "its prevHash does not match the entry before it: an entry was removed, inserted or reordered"))
            }
            if AuditChain.hash(of: entry, digest: digest) != entry.hash {
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq,
                    reason: "its content does not match its hash: the entry was altered"))
            }
            expectedPrev = entry.hash
            checked += 1
        }
        return AuditChainReport(checked: checked, firstBad: nil)
    }

    /// Checks the keyed chain too: every entry's MAC under `keys` and the anchor of the newest entry. Names a rewritten
    /// chain, a chain copied from another store, and entries cut off the end.
    package func verifyAuditChain(keys: AuditKeys) throws -> AuditChainReport {
        let hashes = try verifyAuditChain()
        if hashes.firstBad != nil { return hashes }
        let base = try auditBase()
        if let base {
            guard let anchor = base.anchor, constantTimeEqual(try keys.baseMAC(base), anchor) else {
                return AuditChainReport(checked: 0, firstBad: .init(seq: base.seq + 1, reason: "the log's base (entry "
                    + "\(base.seq), where archived entries end) does not hold under this store's master key: it was set "
                    + "or changed outside keymgr"))
            }
        }
        var prevMac: String? = base?.mac
        var checked = 0
        var last: AuditEventRecord?
        let cursor = try AuditEventRecord.order(AuditEventRecord.Columns.seq).fetchCursor(db)
        while let entry = try cursor.next() {
            guard let mac = entry.mac, Hex.decode(mac) != nil else {
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq,
                    reason: "it has no MAC: it was written without the master key"))
            }
            guard try keys.mac(of: entry, prevMac: prevMac) == mac else {
                let reason = checked == 0
                    ? "its MAC does not hold under this store's master key: the chain was rewritten, or copied from another store"
                    : "its MAC does not hold under this store's master key: the chain was rewritten from here on (entries removed, inserted, altered or re-hashed)"
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq, reason: reason))
            }
            prevMac = mac
            checked += 1
            last = entry
        }
        let anchor = try Row.fetchOne(db, sql: "SELECT audit_anchor_seq, audit_anchor_mac FROM device WHERE id = 1")
        let anchorSeq: Int64? = anchor?["audit_anchor_seq"]
        let anchorMac: Data? = anchor?["audit_anchor_mac"]
        guard let last else {
            if let anchorSeq {
                return AuditChainReport(checked: 0, firstBad: .init(seq: 1,
                    reason: "the log is empty but its anchor names entry \(anchorSeq): every entry was removed"))
            }
            return AuditChainReport(checked: 0, firstBad: nil)
        }
        guard let anchorSeq, let anchorMac else {
            return AuditChainReport(checked: checked, firstBad: .init(seq: last.seq,
                reason: "the device row holds no anchor for the newest entry: it was removed without the master key"))
        }
        if anchorSeq > last.seq {
            return AuditChainReport(checked: checked, firstBad: .init(seq: last.seq + 1,
                reason: "the tail was cut off: the anchor names entry \(anchorSeq) but the log ends at \(last.seq)"))
        }
        guard anchorSeq == last.seq, let lastMac = last.mac,
              constantTimeEqual(try keys.anchorMAC(seq: last.seq, mac: lastMac), [UInt8](anchorMac)) else {
            return AuditChainReport(checked: checked, firstBad: .init(seq: last.seq,
                reason: "the anchor in the device row does not match the newest entry: the log or its anchor was replaced"))
        }
        return AuditChainReport(checked: checked, firstBad: nil)
    }
}

/// The audit log's base: the newest entry `audit archive` removed, from which the rest of the chain continues.
package struct AuditBase: Sendable, Equatable {
    package var seq: Int64
    package var hash: String
    package var mac: String
    /// The MAC over the three under the audit key (nil before it is set).
    package var anchor: [UInt8]?
}

extension StoreReader {
    /// The log's base, nil while nothing was archived.
    package func auditBase() throws -> AuditBase? {
        guard let row = try Row.fetchOne(db, sql: """
            SELECT audit_base_seq, audit_base_hash, audit_base_mac, audit_base_anchor FROM device WHERE id = 1
            """), let seq: Int64 = row["audit_base_seq"], let hash: String = row["audit_base_hash"],
              let mac: String = row["audit_base_mac"] else { return nil }
        let anchor: Data? = row["audit_base_anchor"]
        return AuditBase(seq: seq, hash: hash, mac: mac, anchor: anchor.map { [UInt8]($0) })
    }

    /// The seq of the newest entry written before `date` (nil when none is).
    package func newestAuditSeq(before date: Date) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT MAX(seq) FROM audit_events WHERE at < ?", arguments: [Timestamp.string(from: date)])
    }
}

/// Compares two MACs in time independent of where they differ.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}

extension StoreWriter {
    /// Appends an audit entry chained to the last one, in this transaction.
    @discardableResult
    package func appendAudit(_ event: NewAuditEvent) throws -> AuditEventRecord {
        let last = try Row.fetchOne(db, sql: "SELECT seq, hash, mac FROM audit_events ORDER BY seq DESC LIMIT 1")
        // A log whose every entry was archived continues from its base.
        let base = last == nil ? try auditBase() : nil
        let prevHash: String = last?["hash"] ?? base?.hash ?? AuditChain.genesis
        let prevMac: String? = last?["mac"] ?? base?.mac
        let lastSeq: Int64 = last?["seq"] ?? base?.seq ?? 0
        var entry = AuditEventRecord(seq: lastSeq + 1, at: Timestamp.string(from: event.at), event: event.event,
                                     userId: event.userId, kid: event.kid, actor: event.actor, details: event.details,
                                     prevHash: prevHash, hash: "", mac: nil)
        entry.hash = AuditChain.hash(of: entry, digest: digest)
        if let auditKeys {
            if (last != nil || base != nil) && prevMac == nil {
                throw StorageError(.tampered, "the newest audit entry has no MAC: the log was written without the master key; "
                    + "run `keymgr audit verify` and restore the store from a backup")
            }
            entry.mac = try auditKeys.mac(of: entry, prevMac: prevMac)
        }
        try db.execute(sql: """
            INSERT INTO audit_events (seq, at, event, user_id, kid, actor, details, prev_hash, hash, mac)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [entry.seq, entry.at, entry.event, entry.userId, entry.kid, entry.actor, entry.details,
                             entry.prevHash, entry.hash, entry.mac])
        if let auditKeys, let mac = entry.mac { try setAuditAnchor(seq: entry.seq, mac: mac, keys: auditKeys) }
        appendedAudit.append(entry)
        return entry
    }

    /// (Re)computes every entry's keyed MAC under `keys` and anchors the newest: for a store made before the keyed
    /// chain (once, when it is first opened with the master key) and for `master rotate`. Checks the SHA-256 chain
    /// first, so a chain broken before stamping is never blessed. Returns how many entries were stamped.
    @discardableResult
    package func stampAuditChain(keys: AuditKeys) throws -> Int {
        if let bad = try verifyAuditChain().firstBad {
            throw StorageError(.tampered, "the audit log is broken at entry \(bad.seq) (\(bad.reason)): it cannot be re-keyed; "
                + "restore the store from a backup")
        }
        let base = try auditBase()
        var prevMac: String? = base?.mac
        if let base { try setAuditBase(base, keys: keys) }
        var stamped = 0
        var newest: (Int64, String)?
        let entries = try AuditEventRecord.order(AuditEventRecord.Columns.seq).fetchAll(db)
        for entry in entries {
            let mac = try keys.mac(of: entry, prevMac: prevMac)
            try db.execute(sql: "UPDATE audit_events SET mac = ? WHERE seq = ?", arguments: [mac, entry.seq])
            prevMac = mac
            stamped += 1
            newest = (entry.seq, mac)
        }
        if let (seq, mac) = newest { try setAuditAnchor(seq: seq, mac: mac, keys: keys) }
        return stamped
    }

    /// Removes the entries up to `lastSeq` (an archive has them), after checking the whole keyed chain, and makes
    /// the newest of them the log's base, MAC'd under `keys`: the rest of the chain verifies from it. `lastHash` is
    /// the hash the archive holds for entry `lastSeq`; anything else there (the log changed since it was read) throws.
    /// Returns how many entries were removed.
    @discardableResult
    package func archiveAudit(through lastSeq: Int64, lastHash: String, keys: AuditKeys) throws -> Int {
        if let bad = try verifyAuditChain(keys: keys).firstBad {
            throw StorageError(.tampered, "the audit log is broken at entry \(bad.seq) (\(bad.reason)): nothing was archived; "
                + "run `keymgr audit verify` and restore the store from a backup")
        }
        guard let last = try AuditEventRecord.fetchOne(db, sql: "SELECT * FROM audit_events WHERE seq = ?", arguments: [lastSeq]),
              last.hash == lastHash, let mac = last.mac else {
            throw StorageError(.conflict, "the audit log changed while it was archived: nothing was removed; run the archive again")
        }
        try setAuditBase(AuditBase(seq: last.seq, hash: last.hash, mac: mac, anchor: nil), keys: keys)
        try db.execute(sql: "DELETE FROM audit_events WHERE seq <= ?", arguments: [lastSeq])
        return db.changesCount
    }

    private func setAuditBase(_ base: AuditBase, keys: AuditKeys) throws {
        try db.execute(sql: "UPDATE device SET audit_base_seq = ?, audit_base_hash = ?, audit_base_mac = ?, audit_base_anchor = ? WHERE id = 1",
                       arguments: [base.seq, base.hash, base.mac, Data(try keys.baseMAC(base))])
    }

    private func setAuditAnchor(seq: Int64, mac: String, keys: AuditKeys) throws {
        try db.execute(sql: "UPDATE device SET audit_anchor_seq = ?, audit_anchor_mac = ? WHERE id = 1",
                       arguments: [seq, Data(try keys.anchorMAC(seq: seq, mac: mac))])
    }
}

extension AuditEventRecord {
    /// An audit row read by column name, without `Decodable`: `audit` and `audit verify` read every entry of a log
    /// that may hold millions, where the decoder's snake-case key conversion cost more than the query.
    ///
    /// - Throws: GRDB's error for a missing column or a NULL where the schema has none.
    package init(row: Row) throws {
        seq = try row.decode(forColumn: "seq")
        at = try row.decode(forColumn: "at")
        event = try row.decode(forColumn: "event")
        userId = try row.decode(forColumn: "user_id")
        kid = try row.decode(forColumn: "kid")
        actor = try row.decode(forColumn: "actor")
        details = try row.decode(forColumn: "details")
        prevHash = try row.decode(forColumn: "prev_hash")
        hash = try row.decode(forColumn: "hash")
        mac = try row.decode(forColumn: "mac")
    }
}

extension AuditEventRecord {
    /// An entry as a copy of the log carries it (the journal's fields, an archive's line), to be checked offline.
    package init(seq: Int64, at: String, event: String, userId: String?, kid: String?, actor: String, details: String,
                 prevHash: String, hash: String) {
        self.init(seq: seq, at: at, event: event, userId: userId, kid: kid, actor: actor, details: details,
                  prevHash: prevHash, hash: hash, mac: nil)
    }

    /// The hash the chain's rule gives this entry's fields and `prevHash`: equal to `hash` unless it was altered.
    package func computedHash(digest: AuditDigest) -> String { AuditChain.hash(of: self, digest: digest) }
}
