import COpenSSL
import KeymgrCore

/// The reference server's own crypto, straight on libcrypto: SHA-256, random bytes and ES256 verification under a
/// public JWK. It shares no code with keymgr's `P256PublicKey` and `JWS.verify` (Sources/KeyManager/Crypto): the key
/// is read as a SubjectPublicKeyInfo built here and the signature re-encoded as DER here, so a bug in keymgr's signer
/// or verifier is not accepted by keymgr's own test server (RefServerTests.IndependentVerificationTests).
enum ServerCrypto {
    /// SHA-256 of `bytes`.
    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        // A one-byte buffer stands in for an empty input: libcrypto wants a pointer even for zero bytes.
        let input = bytes.isEmpty ? [0] : bytes
        _ = input.withUnsafeBufferPointer { SHA256($0.baseAddress, bytes.count, &digest) }
        return digest
    }

    /// `count` bytes from libcrypto's CSPRNG.
    static func randomBytes(count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: max(count, 1))
        guard RAND_bytes(&bytes, Int32(bytes.count)) == 1 else {
            ERR_clear_error()
            throw KeyManagerError(.failure, "the reference server could not draw random bytes")
        }
        return Array(bytes.prefix(count))
    }

    /// Whether `signature` (raw `r || s`, 64 bytes) is an ES256 signature of `message` under the P-256 point (`x`, `y`),
    /// 32 bytes each. Anything malformed (lengths, a point off the curve) is simply not valid.
    static func isValidES256(signature: [UInt8], message: [UInt8], x: [UInt8], y: [UInt8]) -> Bool {
        defer { ERR_clear_error() }
        guard signature.count == 64, x.count == 32, y.count == 32 else { return false }
        // SubjectPublicKeyInfo (RFC 5480) of an uncompressed point: id-ecPublicKey, prime256v1, then 04 || x || y.
        let spki: [UInt8] = [0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
                             0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04] + x + y
        let key: OpaquePointer? = spki.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let key else { return false }
        defer { EVP_PKEY_free(key) }
        guard let check = EVP_PKEY_CTX_new(key, nil) else { return false }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else { return false }

        let der = derSignature(r: signature[0..<32], s: signature[32..<64])
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        let input = message.isEmpty ? [0] : message
        return input.withUnsafeBufferPointer { data in
            der.withUnsafeBufferPointer { sig in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, data.baseAddress, message.count) == 1
            }
        }
    }

    /// ECDSA-Sig-Value (RFC 3279): SEQUENCE of the two INTEGERs, each minimal and non-negative.
    private static func derSignature(r: ArraySlice<UInt8>, s: ArraySlice<UInt8>) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop(while: { $0 == 0 }))
            if value.isEmpty { value = [0] }
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(r) + integer(s)
        return [0x30, UInt8(body.count)] + body  // at most 70 bytes: short-form lengths
    }
}

extension JWK {
    /// The RFC 7638 thumbprint, hashed by the server's own SHA-256.
    func serverThumbprint() throws -> String {
        Base64URL.encode(ServerCrypto.sha256(try thumbprintInput()))
    }
}
