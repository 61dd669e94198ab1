/// Signing and verifying compact JWSs (RFC 7515 §7.1), ES256 only, with keymgr's P-256 keys. The value types and
/// `JWS.decode` are KeymgrCore's.
extension JWS {
    /// Signs `claims` under `header` with ES256 and returns the compact JWS.
    ///
    /// Header and payload are encoded as canonical JSON (sorted keys, no whitespace). `header` must contain
    /// `"alg": "ES256"`; otherwise this throws `.badInput`.
    package static func sign(
        header: [String: JSONValue], claims: [String: JSONValue], key: some ES256Signer
    ) throws -> String {
        guard header["alg"] == .string(algorithm) else {
            throw KeyManagerError(.badInput, "a JWS header must say \"alg\": \"ES256\"")
        }
        let encodedHeader = Base64URL.encode(Array(JSONValue.object(header).canonicalJSON().utf8))
        let encodedPayload = Base64URL.encode(Array(JSONValue.object(claims).canonicalJSON().utf8))
        let signingInput = encodedHeader + "." + encodedPayload
        let signature = try key.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// Decodes `compact` and checks its ES256 signature under `publicKey`.
    ///
    /// Throws `.badInput` when the JWS is malformed, its `alg` is not ES256, it has a `crit` header
    /// (no extensions are understood), or with "JWS signature does not verify" when the signature is wrong.
    package static func verify(_ compact: String, publicKey: P256PublicKey) throws -> DecodedJWS {
        let decoded = try decode(compact)
        guard decoded.header["alg"] == .string(algorithm) else {
            throw KeyManagerError(.badInput, "JWS alg must be ES256")
        }
        guard decoded.header["crit"] == nil else {
            throw KeyManagerError(.badInput, "JWS has critical header extensions keymgr does not understand")
        }
        guard publicKey.isValidSignature(decoded.signature, for: decoded.signingInput) else {
            throw KeyManagerError(.badInput, signatureDoesNotVerifyMessage)
        }
        return decoded
    }
}
