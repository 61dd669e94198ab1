import COpenSSL

/// AES-256-GCM authenticated encryption of secrets at rest, through OpenSSL's `EVP_CIPHER`.
///
/// A sealed value is `0x01 || nonce (12 bytes) || ciphertext || tag (16 bytes)`. Every `seal` draws a fresh
/// random 96-bit nonce. The AAD names the row and column the value belongs to, so a sealed value copied
/// to another row fails to open.
package enum AESGCM {
    /// The key length in bytes (AES-256).
    package static let keyByteCount = 32
    /// The nonce length in bytes (96 bits).
    package static let nonceByteCount = 12
    /// The authentication tag length in bytes.
    package static let tagByteCount = 16
    /// The format version byte that starts every sealed value.
    package static let formatVersion: UInt8 = 0x01

    /// The message of the `.failure` error thrown when a sealed value does not open (wrong key, wrong AAD,
    /// tampered, truncated or of an unknown format); see `isOpenFailure(_:)`.
    package static let openFailedMessage = "sealed value could not be opened: wrong key or it belongs to another row"

    private static let overhead = 1 + nonceByteCount + tagByteCount

    /// Seals `plaintext` under the 32-byte `key`, binding it to `aad`.
    package static func seal(_ plaintext: SecretBytes, key: SecretBytes, aad: [UInt8]) throws -> [UInt8] {
        try checkKey(key)
        guard plaintext.count <= Int(Int32.max) - overhead, aad.count <= Int(Int32.max) else {
            throw KeyManagerError(.failure, "value is too large to seal")
        }
        let nonce = try SecureRandom.bytes(count: nonceByteCount)
        var sealed = [UInt8](repeating: 0, count: overhead + plaintext.count)
        sealed[0] = formatVersion
        sealed.replaceSubrange(1...nonceByteCount, with: nonce)

        guard let context = EVP_CIPHER_CTX_new() else { throw openSSLFailure("creating an AES-GCM context") }
        defer { EVP_CIPHER_CTX_free(context) }  // also erases the expanded key

        try key.withUnsafeBytes { keyBytes in
            try sealed.withUnsafeMutableBufferPointer { out in
                guard let base = out.baseAddress else { throw KeyManagerError(.failure, "AES-GCM output buffer") }
                let noncePointer = base + 1
                let ciphertextPointer = base + 1 + nonceByteCount
                let tagPointer = ciphertextPointer + plaintext.count
                guard EVP_EncryptInit_ex2(
                    context, EVP_aes_256_gcm(), keyBytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    noncePointer, nil) == 1
                else { throw openSSLFailure("AES-GCM seal setup") }
                var length: Int32 = 0
                if !aad.isEmpty {
                    let status = aad.withUnsafeBufferPointer {
                        EVP_EncryptUpdate(context, nil, &length, $0.baseAddress, Int32($0.count))
                    }
                    guard status == 1 else { throw openSSLFailure("AES-GCM seal (AAD)") }
                }
                if plaintext.count > 0 {
                    let status = plaintext.withUnsafeBytes {
                        EVP_EncryptUpdate(
                            context, ciphertextPointer, &length, $0.baseAddress?.assumingMemoryBound(to: UInt8.self),
                            Int32($0.count))
                    }
                    guard status == 1, length == Int32(plaintext.count) else { throw openSSLFailure("AES-GCM seal") }
                }
                guard EVP_EncryptFinal_ex(context, tagPointer, &length) == 1, length == 0 else {
                    throw openSSLFailure("AES-GCM seal (final)")
                }
                guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagByteCount), tagPointer) == 1 else {
                    throw openSSLFailure("AES-GCM seal (tag)")
                }
            }
        }
        return sealed
    }

    /// Opens a value sealed by `seal` under `key` and `aad`.
    ///
    /// Throws `OpenFailure` (code `failure`, `openFailedMessage`) when the key or AAD is wrong or the value was
    /// tampered with, truncated or is of an unknown format.
    package static func open(_ sealed: [UInt8], key: SecretBytes, aad: [UInt8]) throws -> SecretBytes {
        try checkKey(key)
        guard sealed.count >= overhead, sealed[0] == formatVersion,
            sealed.count <= Int(Int32.max), aad.count <= Int(Int32.max)
        else {
            throw openFailed
        }
        let ciphertextCount = sealed.count - overhead

        guard let context = EVP_CIPHER_CTX_new() else { throw openSSLFailure("creating an AES-GCM context") }
        defer { EVP_CIPHER_CTX_free(context) }

        return try SecretBytes(count: ciphertextCount) { plaintext in
            try key.withUnsafeBytes { keyBytes in
                try sealed.withUnsafeBufferPointer { input in
                    guard let base = input.baseAddress else { throw openFailed }
                    let noncePointer = base + 1
                    let ciphertextPointer = base + 1 + nonceByteCount
                    let tagPointer = ciphertextPointer + ciphertextCount
                    guard EVP_DecryptInit_ex2(
                        context, EVP_aes_256_gcm(), keyBytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                        noncePointer, nil) == 1
                    else { throw openSSLFailure("AES-GCM open setup") }
                    var length: Int32 = 0
                    if !aad.isEmpty {
                        let status = aad.withUnsafeBufferPointer {
                            EVP_DecryptUpdate(context, nil, &length, $0.baseAddress, Int32($0.count))
                        }
                        guard status == 1 else { throw openSSLFailure("AES-GCM open (AAD)") }
                    }
                    if ciphertextCount > 0 {
                        let status = EVP_DecryptUpdate(
                            context, plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), &length,
                            ciphertextPointer, Int32(ciphertextCount))
                        guard status == 1, length == Int32(ciphertextCount) else {
                            throw openSSLFailure("AES-GCM open")
                        }
                    }
                    // OpenSSL only reads the expected tag.
                    guard EVP_CIPHER_CTX_ctrl(
                        context, EVP_CTRL_GCM_SET_TAG, Int32(tagByteCount), UnsafeMutablePointer(mutating: tagPointer)
                    ) == 1
                    else { throw openSSLFailure("AES-GCM open (tag)") }
                    var finalBlock = [UInt8](repeating: 0, count: 16)
                    guard EVP_DecryptFinal_ex(context, &finalBlock, &length) == 1 else {
                        ERR_clear_error()
                        throw openFailed
                    }
                }
            }
        }
    }

    /// A sealed value that did not open: its own type, so callers tell it from other failures without reading
    /// its message. Reported as any `failure` is (exit 1).
    package struct OpenFailure: KeymgrFailure, Equatable {
        package var code: KeyManagerError.Code { .failure }
        package var message: String { AESGCM.openFailedMessage }
    }

    private static var openFailed: OpenFailure { OpenFailure() }

    private static func checkKey(_ key: SecretBytes) throws {
        guard key.count == keyByteCount else {
            throw KeyManagerError(.failure, "AES-256-GCM key must be \(keyByteCount) bytes, not \(key.count)")
        }
    }
}
