import COpenSSL

/// Random bytes from OpenSSL's CSPRNG (`RAND_bytes`, seeded by the operating system).
package enum SecureRandom {
    /// `count` random bytes, for nonces, salts and identifiers. Use `SecretBytes.random(count:)` for keys.
    package static func bytes(count: Int) throws -> [UInt8] {
        guard count >= 0 else { throw KeyManagerError(.failure, "cannot draw a negative number of random bytes") }
        var result = [UInt8](repeating: 0, count: count)
        try result.withUnsafeMutableBytes { try fill($0) }
        return result
    }

    /// Fills `buffer` with random bytes.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        guard buffer.count <= Int(Int32.max) else {
            throw KeyManagerError(.failure, "too many random bytes requested at once")
        }
        guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else {
            throw openSSLFailure("drawing random bytes")
        }
    }
}
