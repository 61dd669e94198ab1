import COpenSSL

/// HKDF-SHA256 (RFC 5869, extract then expand) through OpenSSL's `EVP_KDF` "HKDF".
package enum HKDF {
    /// Derives `outputByteCount` bytes (1 ... 8160) from `inputKeyMaterial`, `salt` and `info`.
    ///
    /// An empty salt means RFC 5869's default, a string of 32 zero bytes.
    package static func deriveKey(
        inputKeyMaterial: SecretBytes, salt: [UInt8], info: [UInt8], outputByteCount: Int
    ) throws -> SecretBytes {
        guard (1...255 * SHA256.byteCount).contains(outputByteCount) else {
            throw KeyManagerError(.failure, "HKDF-SHA256 output must be 1 to 8160 bytes, not \(outputByteCount)")
        }
        guard inputKeyMaterial.count > 0 else {
            throw KeyManagerError(.failure, "HKDF-SHA256 needs non-empty input key material")
        }
        guard let kdf = EVP_KDF_fetch(nil, OpenSSLNames.hkdf.pointer, nil) else {
            throw openSSLFailure("loading HKDF")
        }
        defer { EVP_KDF_free(kdf) }
        guard let context = EVP_KDF_CTX_new(kdf) else { throw openSSLFailure("creating an HKDF context") }
        defer { EVP_KDF_CTX_free(context) }  // clears the copy of the key OpenSSL made

        return try SecretBytes(count: outputByteCount) { output in
            try inputKeyMaterial.withUnsafeBytes { ikm in
                try withNonNullBytes(salt) { saltPointer, saltCount in
                    try withNonNullBytes(info) { infoPointer, infoCount in
                        var parameters = [
                            OSSL_PARAM_construct_utf8_string(
                                OpenSSLNames.paramDigest.pointer, OpenSSLNames.sha256.mutablePointer, 0),
                            OSSL_PARAM_construct_octet_string(
                                OpenSSLNames.paramKey.pointer, UnsafeMutableRawPointer(mutating: ikm.baseAddress),
                                ikm.count),
                        ]
                        // OpenSSL reads the parameters only; a zero-length salt or info is simply left out.
                        if saltCount > 0 {
                            parameters.append(OSSL_PARAM_construct_octet_string(
                                OpenSSLNames.paramSalt.pointer, UnsafeMutableRawPointer(mutating: saltPointer),
                                saltCount))
                        }
                        if infoCount > 0 {
                            parameters.append(OSSL_PARAM_construct_octet_string(
                                OpenSSLNames.paramInfo.pointer, UnsafeMutableRawPointer(mutating: infoPointer),
                                infoCount))
                        }
                        parameters.append(OSSL_PARAM_construct_end())
                        let status = parameters.withUnsafeBufferPointer { list in
                            EVP_KDF_derive(
                                context, output.baseAddress?.assumingMemoryBound(to: UInt8.self), output.count,
                                list.baseAddress)
                        }
                        guard status == 1 else { throw openSSLFailure("HKDF-SHA256 derivation") }
                    }
                }
            }
        }
    }
}
