import COpenSSL

/// SHA-256 (FIPS 180-4) through OpenSSL's `EVP_Digest`.
package enum SHA256 {
    /// The digest length in bytes.
    package static let byteCount = 32

    /// The 32-byte SHA-256 digest of `data`.
    package static func hash(_ data: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let status = withNonNullBytes(data) { input, inputCount in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(input, inputCount, output.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        // SHA-256 over memory cannot fail short of OpenSSL being unusable; an all-zero digest would be
        // silently wrong, so treat that state as the programming error it is.
        precondition(status == 1 && length == UInt32(byteCount), "OpenSSL SHA-256 is unavailable")
        return digest
    }

    /// The SHA-256 digest of any byte sequence (`Data`, `String.UTF8View`, ...).
    package static func hash(_ data: some Sequence<UInt8>) -> [UInt8] {
        hash(Array(data))
    }
}

/// HMAC-SHA256 (RFC 2104) through OpenSSL's one-shot `HMAC`.
package enum HMACSHA256 {
    /// The tag length in bytes.
    package static let byteCount = 32

    /// The 32-byte HMAC-SHA256 of `data` under `key`.
    package static func authenticate(_ data: [UInt8], key: SecretBytes) throws -> [UInt8] {
        guard key.count <= Int(Int32.max) else { throw KeyManagerError(.failure, "HMAC key is too long") }
        var tag = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let result = key.withUnsafeBytes { keyBytes in
            withNonNullBytes(data) { input, inputCount in
                tag.withUnsafeMutableBufferPointer { output in
                    // The key's base address is never nil (SecretBytes guarantees it), which HMAC needs
                    // even for an empty key.
                    HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), input, inputCount,
                         output.baseAddress, &length)
                }
            }
        }
        guard result != nil, length == UInt32(byteCount) else { throw openSSLFailure("HMAC-SHA256") }
        return tag
    }
}
