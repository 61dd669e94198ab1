import Foundation
import COpenSSL
import Synchronization

/// A P-256 (secp256r1) private key for ES256 signatures.
///
/// The 32-byte scalar lives in `SecretBytes`. The first signature imports it into an OpenSSL key that later
/// signatures reuse (an import builds the curve's group afresh: as much work as the signature itself); OpenSSL
/// erases that key when the last copy of this value goes away, as `SecretBytes` erases the scalar.
package struct P256PrivateKey: Sendable {
    /// The private scalar `d`, 32 bytes big-endian. Seal it before it leaves memory.
    package let rawRepresentation: SecretBytes
    /// The matching public key.
    package let publicKey: P256PublicKey
    /// The OpenSSL key signatures use, imported by the first one.
    private let signingKey = ImportedKey()

    /// A new random key pair from OpenSSL's key generator.
    package static func generate() throws -> P256PrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, OpenSSLNames.ec.pointer, nil) else {
            throw openSSLFailure("creating a P-256 key generator")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_group_name(context, OpenSSLNames.p256.pointer) == 1
        else { throw openSSLFailure("setting up P-256 key generation") }
        var generated: OpaquePointer?
        guard EVP_PKEY_generate(context, &generated) == 1, let key = generated else {
            throw openSSLFailure("P-256 key generation")
        }
        defer { EVP_PKEY_free(key) }

        var scalar: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, OpenSSLNames.paramPrivateKey.pointer, &scalar) == 1, let d = scalar else {
            throw openSSLFailure("reading the generated P-256 key")
        }
        defer { BN_clear_free(d) }
        let raw = try SecretBytes(count: P256.scalarByteCount) { buffer in
            guard BN_bn2binpad(d, buffer.baseAddress?.assumingMemoryBound(to: UInt8.self),
                               Int32(P256.scalarByteCount)) == Int32(P256.scalarByteCount)
            else { throw openSSLFailure("reading the generated P-256 key") }
        }
        return try P256PrivateKey(rawRepresentation: raw)
    }

    /// Imports the 32-byte big-endian private scalar `d` and computes its public key.
    ///
    /// Throws `.badInput` when `d` is not 32 bytes or not in `1 ..< n`.
    package init(rawRepresentation: SecretBytes) throws {
        guard rawRepresentation.count == P256.scalarByteCount else {
            throw KeyManagerError(.badInput, "a P-256 private key must be \(P256.scalarByteCount) bytes")
        }
        guard let group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1) else {
            throw openSSLFailure("loading the P-256 curve")
        }
        defer { EC_GROUP_free(group) }
        guard let context = BN_CTX_secure_new() else { throw openSSLFailure("allocating big-number scratch space") }
        defer { BN_CTX_free(context) }
        guard let d = BN_secure_new() else { throw openSSLFailure("allocating a P-256 scalar") }
        defer { BN_clear_free(d) }
        let imported = rawRepresentation.withUnsafeBytes {
            BN_bin2bn($0.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32($0.count), d)
        }
        guard imported != nil else { throw openSSLFailure("importing a P-256 scalar") }
        BN_set_flags(d, BN_FLG_CONSTTIME)
        guard let order = EC_GROUP_get0_order(group) else { throw openSSLFailure("reading the P-256 order") }
        guard BN_is_zero(d) == 0, BN_cmp(d, order) < 0 else {
            throw KeyManagerError(.badInput, "a P-256 private key must be between 1 and the curve order")
        }
        guard let point = EC_POINT_new(group) else { throw openSSLFailure("allocating a P-256 point") }
        defer { EC_POINT_free(point) }
        guard EC_POINT_mul(group, point, d, nil, nil, context) == 1 else {
            throw openSSLFailure("computing a P-256 public key")
        }
        guard let x = BN_new() else { throw openSSLFailure("allocating a big number") }
        defer { BN_free(x) }
        guard let y = BN_new() else { throw openSSLFailure("allocating a big number") }
        defer { BN_free(y) }
        guard EC_POINT_get_affine_coordinates(group, point, x, y, context) == 1 else {
            throw openSSLFailure("computing a P-256 public key")
        }
        self.rawRepresentation = rawRepresentation
        self.publicKey = try P256PublicKey(trustedX: P256.bytes(of: x), y: P256.bytes(of: y))
    }

    /// The ES256 signature of `message` (JWS / RFC 7518 §3.4): ECDSA P-256 over SHA-256(`message`), as the
    /// 64-byte `r || s` with each half left-padded to 32 bytes, not DER.
    package func signature(for message: [UInt8]) throws -> [UInt8] {
        let key = try signingKey.key { try P256.makeKey(x: publicKey.x, y: publicKey.y, privateScalar: rawRepresentation) }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { throw openSSLFailure("creating a signing context") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit_ex(context, nil, OpenSSLNames.sha256.pointer, nil, nil, key, nil) == 1 else {
            throw openSSLFailure("ES256 signing setup")
        }
        let der: [UInt8] = try withNonNullBytes(message) { input, inputCount in
            var length = 0
            // With a NULL output buffer OpenSSL reports the maximum DER length and consumes nothing.
            guard EVP_DigestSign(context, nil, &length, input, inputCount) == 1, length > 0 else {
                throw openSSLFailure("ES256 signing")
            }
            var der = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &der, &length, input, inputCount) == 1 else {
                throw openSSLFailure("ES256 signing")
            }
            return Array(der.prefix(length))
        }
        return try P256.rawSignature(fromDER: der)
    }
}

/// An OpenSSL key made once and shared by the copies of the value that holds it; freed (and, for a private key,
/// erased by OpenSSL) when the last copy goes away.
private final class ImportedKey: Sendable {
    private let imported = Mutex<OpaquePointer?>(nil)

    /// The key, made by `make` on first use. The caller owns one reference and frees it with `EVP_PKEY_free`, so
    /// a signature in progress keeps the key alive whatever happens to this value meanwhile.
    func key(_ make: () throws -> OpaquePointer) throws -> OpaquePointer {
        try imported.withLock { imported in
            let key: OpaquePointer
            if let existing = imported {
                key = existing
            } else {
                key = try make()
                imported = key
            }
            guard EVP_PKEY_up_ref(key) == 1 else { throw openSSLFailure("holding a P-256 key") }
            return key
        }
    }

    deinit {
        imported.withLock { imported in
            if let key = imported { EVP_PKEY_free(key) }
        }
    }
}

/// A P-256 public key for verifying ES256 signatures; always a valid point on the curve.
package struct P256PublicKey: Sendable, Equatable {
    /// The affine x coordinate, 32 bytes big-endian.
    package let x: [UInt8]
    /// The affine y coordinate, 32 bytes big-endian.
    package let y: [UInt8]

    /// Imports the affine coordinates of a point. Throws `.badInput` unless both are 32 bytes and the point
    /// is on P-256 (OpenSSL's full public-key check).
    package init(x: [UInt8], y: [UInt8]) throws {
        guard x.count == P256.coordinateByteCount, y.count == P256.coordinateByteCount else {
            throw KeyManagerError(.badInput, "P-256 public key coordinates must be 32 bytes each")
        }
        let key = try P256.makeKey(x: x, y: y, privateScalar: nil)
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else {
            throw openSSLFailure("creating a key-check context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_public_check(context) == 1 else {
            ERR_clear_error()
            throw KeyManagerError(.badInput, "the public key is not a valid point on P-256")
        }
        self.x = x
        self.y = y
    }

    /// Imports a public JWK: `kty` "EC", `crv` "P-256", base64url `x` and `y` of 32 bytes each.
    /// Other members (`kid`, `use`, `alg`, even `d`) are ignored. Throws `.badInput` otherwise.
    package init(jwk: JWK) throws {
        guard jwk.kty == "EC" else { throw KeyManagerError(.badInput, "JWK kty must be \"EC\" for a P-256 key") }
        guard jwk.crv == "P-256" else { throw KeyManagerError(.badInput, "JWK crv must be \"P-256\"") }
        guard let xText = jwk.x, let x = Base64URL.decode(xText), let yText = jwk.y, let y = Base64URL.decode(yText)
        else { throw KeyManagerError(.badInput, "JWK x and y must be base64url") }
        try self.init(x: x, y: y)
    }

    /// For coordinates OpenSSL has just computed from a valid private key.
    fileprivate init(trustedX x: [UInt8], y: [UInt8]) {
        self.x = x
        self.y = y
    }

    /// Whether `signature` (raw 64-byte `r || s`) is a valid ES256 signature of `message` under this key.
    /// Any other length is simply invalid.
    package func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == 2 * P256.scalarByteCount,
            let der = P256.derSignature(fromRaw: signature),
            let key = try? P256.makeKey(x: x, y: y, privateScalar: nil)
        else {
            ERR_clear_error()
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else {
            ERR_clear_error()
            return false
        }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit_ex(context, nil, OpenSSLNames.sha256.pointer, nil, nil, key, nil) == 1 else {
            ERR_clear_error()
            return false
        }
        let status = withNonNullBytes(message) { input, inputCount in
            EVP_DigestVerify(context, der, der.count, input, inputCount)
        }
        ERR_clear_error()  // a bad signature leaves an entry on OpenSSL's error queue
        return status == 1
    }

    /// The SubjectPublicKeyInfo (RFC 5480: id-ecPublicKey, prime256v1, the uncompressed point) as PEM (RFC 7468),
    /// as `openssl pkey -pubin` reads it.
    package func pem() -> String {
        // The DER header of a P-256 SubjectPublicKeyInfo is fixed; the 65-byte point follows it.
        let header: [UInt8] = [0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08,
                               0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04]
        let base64 = Data(header + x + y).base64EncodedString()
        var lines: [Substring] = []
        var rest = Substring(base64)
        while !rest.isEmpty {
            lines.append(rest.prefix(64))
            rest = rest.dropFirst(64)
        }
        return "-----BEGIN PUBLIC KEY-----\n" + lines.joined(separator: "\n") + "\n-----END PUBLIC KEY-----\n"
    }

    /// The public JWK (RFC 7517 / 7518 §6.2): `kty` "EC", `crv` "P-256", `x`, `y`, and the given
    /// `kid`, `use` and `alg` (each left out when nil).
    package func jwk(kid: String?, use: String? = "sig", alg: String? = "ES256") -> JWK {
        JWK(kty: "EC", crv: "P-256", x: Base64URL.encode(x), y: Base64URL.encode(y), use: use, alg: alg, kid: kid)
    }
}

/// OpenSSL plumbing shared by the P-256 key types.
enum P256 {
    static let scalarByteCount = 32
    static let coordinateByteCount = 32

    /// An OpenSSL key for P-256 built from the public point and, optionally, the private scalar.
    /// The caller frees it with `EVP_PKEY_free`. A point OpenSSL cannot decode gives `.badInput`.
    static func makeKey(x: [UInt8], y: [UInt8], privateScalar: SecretBytes?) throws -> OpaquePointer {
        guard let builder = OSSL_PARAM_BLD_new() else { throw openSSLFailure("creating a key parameter builder") }
        defer { OSSL_PARAM_BLD_free(builder) }
        // A secure big number, so OSSL_PARAM_free erases the parameters' copy of the scalar.
        var scalar: OpaquePointer?
        defer { if let scalar { BN_clear_free(scalar) } }
        if let privateScalar {
            guard let d = BN_secure_new() else { throw openSSLFailure("allocating a P-256 scalar") }
            scalar = d
            let imported = privateScalar.withUnsafeBytes {
                BN_bin2bn($0.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32($0.count), d)
            }
            guard imported != nil else { throw openSSLFailure("importing a P-256 scalar") }
        }
        // Uncompressed SEC 1 point: 0x04 || x || y.
        let point: [UInt8] = [0x04] + x + y
        let parameters: UnsafeMutablePointer<OSSL_PARAM> = try point.withUnsafeBytes { pointBytes in
            // The builder keeps pointers, not copies, until OSSL_PARAM_BLD_to_param; keep both calls here.
            guard OSSL_PARAM_BLD_push_utf8_string(
                builder, OpenSSLNames.paramGroupName.pointer, OpenSSLNames.p256.pointer, 0) == 1,
                OSSL_PARAM_BLD_push_octet_string(
                    builder, OpenSSLNames.paramPublicKey.pointer, pointBytes.baseAddress, pointBytes.count) == 1
            else { throw openSSLFailure("building P-256 key parameters") }
            if let scalar {
                guard OSSL_PARAM_BLD_push_BN(builder, OpenSSLNames.paramPrivateKey.pointer, scalar) == 1 else {
                    throw openSSLFailure("building P-256 key parameters")
                }
            }
            guard let parameters = OSSL_PARAM_BLD_to_param(builder) else {
                throw openSSLFailure("building P-256 key parameters")
            }
            return parameters
        }
        defer { OSSL_PARAM_free(parameters) }

        guard let context = EVP_PKEY_CTX_new_from_name(nil, OpenSSLNames.ec.pointer, nil) else {
            throw openSSLFailure("creating a key import context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_fromdata_init(context) == 1 else { throw openSSLFailure("P-256 key import setup") }
        var key: OpaquePointer?
        let selection = privateScalar == nil ? OpenSSLKeySelection.publicKey : OpenSSLKeySelection.keyPair
        guard EVP_PKEY_fromdata(context, &key, selection, parameters) == 1, let key else {
            if privateScalar == nil {
                ERR_clear_error()
                throw KeyManagerError(.badInput, "the public key is not a valid point on P-256")
            }
            throw openSSLFailure("P-256 key import")
        }
        return key
    }

    /// `value` as exactly 32 big-endian bytes.
    static func bytes(of value: OpaquePointer) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: coordinateByteCount)
        guard BN_bn2binpad(value, &out, Int32(coordinateByteCount)) == Int32(coordinateByteCount) else {
            throw openSSLFailure("encoding a P-256 value")
        }
        return out
    }

    /// DER `ECDSA-Sig-Value` (what OpenSSL produces) to JOSE's fixed-width `r || s`.
    static func rawSignature(fromDER der: [UInt8]) throws -> [UInt8] {
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw openSSLFailure("decoding an ECDSA signature") }
        defer { ECDSA_SIG_free(signature) }
        guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature) else {
            throw openSSLFailure("decoding an ECDSA signature")
        }
        var raw = [UInt8](repeating: 0, count: 2 * scalarByteCount)
        let ok = raw.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return BN_bn2binpad(r, base, Int32(scalarByteCount)) == Int32(scalarByteCount)
                && BN_bn2binpad(s, base + scalarByteCount, Int32(scalarByteCount)) == Int32(scalarByteCount)
        }
        guard ok else { throw openSSLFailure("encoding an ECDSA signature") }
        return raw
    }

    /// JOSE's fixed-width `r || s` to DER, or nil if OpenSSL cannot encode it.
    static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * scalarByteCount, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let halves: (OpaquePointer?, OpaquePointer?) = raw.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return (nil, nil) }
            return (BN_bin2bn(base, Int32(scalarByteCount), nil),
                    BN_bin2bn(base + scalarByteCount, Int32(scalarByteCount), nil))
        }
        guard let r = halves.0, let s = halves.1 else {
            BN_free(halves.0)
            BN_free(halves.1)
            return nil
        }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {  // on success the signature owns r and s
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}
