import Foundation
import Storage

// Failing closed after tampering: the first command that finds a row whose MAC does not hold records it in the
// device row (under its row MAC), and from then on no secret of that user is released until an administrator clears
// the finding, which needs `keymgr audit verify` to be clean first.

/// A recorded tampering finding: what was found, when, and whose row it was (nil: no user's, so every user's).
public struct TamperingFinding: Sendable, Equatable {
    public var what: String
    public var at: Date
    public var userId: String?

    /// Whether it stops the release of `userId`'s secrets.
    public func concerns(_ userId: String) -> Bool { self.userId == nil || self.userId == userId }

    init?(json: String?) {
        guard let json, let object = (try? JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)))?.objectValue,
              let what = object["what"]?.stringValue, let at = object["at"]?.stringValue.flatMap(ISOTime.date(from:)) else {
            return nil
        }
        self.what = what
        self.at = at
        userId = object["userId"]?.stringValue
    }

    init(what: String, at: Date, userId: String?) {
        self.what = what
        self.at = at
        self.userId = userId
    }

    var json: String {
        JSONValue.object(["what": .string(what), "at": .string(ISOTime.string(from: at)),
                          "userId": userId.map(JSONValue.string) ?? .null]).canonicalJSON()
    }
}

extension KeyManager {
    /// Records `error` (a `tampered` finding) in the device row, audited, unless a finding is recorded already.
    /// Best effort: a store opened read-only, or one whose device row is itself the tampered row, records nothing
    /// (the device row is checked by every command, so that one keeps failing on its own).
    func recordTampering(_ error: KeyManagerError) {
        guard error.code == .tampered else { return }
        // Through the store directly, not `write`: a tampered row met here is not recorded again.
        do {
            let keys = masterKeys
            try Self.mapped {
                try store.write(audit: keys.integrity.auditKeys, rows: keys.integrity.rowKeys) { writer in
                    guard var device = try writer.device(), device.tampering == nil else { return }
                    let finding = TamperingFinding(what: error.message, at: now(), userId: try Self.tamperedUser(error.message, writer))
                    device.tampering = finding.json
                    try writer.save(device)
                    try writer.appendAudit(auditEvent("store.tampered", userId: finding.userId, details: [
                        "what": .string(finding.what),
                    ]))
                }
            }
        } catch {
            logger.debug("could not record the tampering finding", metadata: ["error": .string("\(error)")])
        }
    }

    /// The user whose row `message` names: `user_id=U` (a per-user row), or the owner of the key `kid=K` / `key K`.
    static func tamperedUser(_ message: String, _ reader: StoreReader) throws -> String? {
        if let user = value(after: "user_id=", in: message) { return user }
        guard let kid = value(after: "kid=", in: message) ?? value(after: "key ", in: message) else { return nil }
        return try reader.uncheckedOwner(ofKey: kid)
    }

    private static func value(after marker: String, in text: String) -> String? {
        guard let range = text.range(of: marker) else { return nil }
        let value = text[range.upperBound...].prefix { !$0.isWhitespace && $0 != "," && $0 != ")" && $0 != ":" }
        return value.isEmpty ? nil : String(value)
    }

    /// Refuses to release a secret of `userId` while a recorded finding concerns them.
    func refuseIfTampered(_ device: DeviceRecord, userId: String) throws {
        guard let finding = TamperingFinding(json: device.tampering), finding.concerns(userId) else { return }
        throw KeyManagerError(.tampered, "this store was found tampered at \(ISOTime.string(from: finding.at)) "
            + "(\(finding.what.prefix(200))), so keymgr releases no secret of \(userId) until an administrator checks it: "
            + "run `keymgr audit verify`, restore or repair what it names, then `keymgr audit clear-tampering`")
    }

    /// Clears the recorded finding once the whole store verifies (`keymgr audit verify` clean), audited as
    /// `store.tamperingCleared`. Returns the finding cleared; nil when there was none.
    /// - Throws: `tampered` when the store does not verify yet.
    @discardableResult
    public func clearTampering() throws -> TamperingFinding? {
        let report = try verifyAudit()
        guard report.isIntact else {
            throw KeyManagerError(.tampered, "the store does not verify yet (\(report.rowIssues.count) row issues"
                + (report.firstBad.map { ", the audit log broken at entry \($0.seq)" } ?? "")
                + "): run `keymgr audit verify` and restore or repair what it names first")
        }
        return try write { writer in
            guard var device = try writer.device(), let finding = TamperingFinding(json: device.tampering) else { return nil }
            device.tampering = nil
            try writer.save(device)
            try writer.appendAudit(auditEvent("store.tamperingCleared", userId: finding.userId, details: [
                "what": .string(finding.what), "foundAt": .string(ISOTime.string(from: finding.at)),
            ]))
            return finding
        }
    }
}
