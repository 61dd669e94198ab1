import Foundation

/// The audit chain's hashing rule: `hash = SHA-256(prevHash || canonical entry)`.
enum AuditChain {
    static let genesis = String(repeating: "0", count: 64)

    /// Length-prefixed fields, so no choice of values can make two different entries encode alike.
    static func canonicalBytes(of entry: AuditEventRecord) -> [UInt8] {
        var out = Array("keymgr-audit-v1".utf8)
        func field(_ value: String?) {
            guard let value else {
                out.append(contentsOf: Array("|-".utf8))
                return
            }
            let bytes = Array(value.utf8)
            out.append(contentsOf: Array("|\(bytes.count):".utf8))
            out.append(contentsOf: bytes)
        }
        field(String(entry.seq))
        field(entry.at)
        field(entry.event)
        field(entry.userId)
        field(entry.kid)
        field(entry.actor)
        field(entry.details)
        return out
    }

    static func hash(of entry: AuditEventRecord, digest: AuditDigest) -> String {
        let prev = Hex.decode(entry.prevHash) ?? Array(entry.prevHash.utf8)
        return Hex.encode(digest(prev + canonicalBytes(of: entry)))
    }
}
