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

/// The keyed half of the audit chain, supplied by the crypto layer with keys derived from the master key.
///
/// `chain` is HMAC-SHA256 under the audit key: `mac = chain(prevMac || canonical entry || hash)`, so nobody without
/// the master key can rewrite, shorten in the middle or transplant the chain consistently. `anchor` MACs the newest
/// entry's seq and mac into the device row, so cutting entries off the end shows too.
package struct AuditKeys: Sendable {
    let chain: @Sendable ([UInt8]) throws -> [UInt8]
    let anchor: @Sendable ([UInt8]) throws -> [UInt8]

    package init(chain: @escaping @Sendable ([UInt8]) throws -> [UInt8],
                anchor: @escaping @Sendable ([UInt8]) throws -> [UInt8]) {
        self.chain = chain
        self.anchor = anchor
    }

    func mac(of entry: AuditEventRecord, prevMac: String?) throws -> String {
        let prev = prevMac.flatMap(Hex.decode) ?? []
        var message = Array("keymgr-audit-mac-v1".utf8)
        message.append(contentsOf: Array("|\(prev.count):".utf8))
        message.append(contentsOf: prev)
        message.append(contentsOf: AuditChain.canonicalBytes(of: entry))
        message.append(contentsOf: Array("|\(entry.hash)".utf8))
        return Hex.encode(try chain(message))
    }

    func baseMAC(_ base: AuditBase) throws -> [UInt8] {
        try anchor(Array("keymgr-audit-base-v1|\(base.seq)|\(base.hash)|\(base.mac)".utf8))
    }

    func anchorMAC(seq: Int64, mac: String) throws -> [UInt8] {
        try anchor(Array("keymgr-audit-anchor-v1|\(seq)|\(mac)".utf8))
    }
}
