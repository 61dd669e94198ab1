extension JWK {
    /// The RFC 7638 JWK thumbprint: base64url(SHA-256(`thumbprintInput()`)). Throws `.badInput` for a `kty` other
    /// than EC and RSA or a missing required member.
    public func thumbprint() throws -> String {
        Base64URL.encode(SHA256.hash(try thumbprintInput()))
    }
}
