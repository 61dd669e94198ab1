/// A JSON Web Key (RFC 7517) as exchanged with servers: every member optional, unknown members ignored.
///
/// `d` exists only so test vectors can be read; keymgr never emits `d` for its own keys.
public struct JWK: Codable, Sendable, Equatable {
    /// Key type: "EC", "RSA", ...
    public var kty: String?
    /// Curve of an EC key: "P-256".
    public var crv: String?
    /// EC x coordinate, base64url.
    public var x: String?
    /// EC y coordinate, base64url.
    public var y: String?
    /// Private scalar, base64url; test vectors only.
    public var d: String?
    /// RSA modulus, base64url.
    public var n: String?
    /// RSA public exponent, base64url.
    public var e: String?
    /// Intended use: "sig".
    public var use: String?
    /// Algorithm: "ES256".
    public var alg: String?
    /// Key identifier.
    public var kid: String?

    /// A JWK with the given members; nil members are left out of its JSON.
    public init(
        kty: String? = nil, crv: String? = nil, x: String? = nil, y: String? = nil, d: String? = nil,
        n: String? = nil, e: String? = nil, use: String? = nil, alg: String? = nil, kid: String? = nil
    ) {
        self.kty = kty
        self.crv = crv
        self.x = x
        self.y = y
        self.d = d
        self.n = n
        self.e = e
        self.use = use
        self.alg = alg
        self.kid = kid
    }

    /// What RFC 7638 hashes for the JWK's thumbprint: the UTF-8 of the JSON object of the required members only,
    /// in lexicographic order, without whitespace. EC uses `crv`, `kty`, `x`, `y`; RSA uses `e`, `kty`, `n`.
    /// Throws `.badInput` for another `kty` or a missing required member. (The SHA-256 is the caller's: KeyManager's
    /// `thumbprint()`, the reference server's own.)
    package func thumbprintInput() throws -> [UInt8] {
        let required: [String: String?]
        switch kty {
        case "EC": required = ["crv": crv, "kty": kty, "x": x, "y": y]
        case "RSA": required = ["e": e, "kty": kty, "n": n]
        default: throw KeyManagerError(.badInput, "JWK thumbprints are defined here for kty EC and RSA only")
        }
        var members: [String: JSONValue] = [:]
        for (name, value) in required {
            guard let value else { throw KeyManagerError(.badInput, "JWK is missing the required member \"\(name)\"") }
            members[name] = .string(value)
        }
        return Array(JSONValue.object(members).canonicalJSON().utf8)
    }

    /// The JWK as a JSON object holding only the members that are present.
    public func jsonObject() -> JSONValue {
        let all: [(String, String?)] = [
            ("kty", kty), ("crv", crv), ("x", x), ("y", y), ("d", d), ("n", n), ("e", e),
            ("use", use), ("alg", alg), ("kid", kid),
        ]
        var members: [String: JSONValue] = [:]
        for case (let name, let value?) in all { members[name] = .string(value) }
        return .object(members)
    }

    /// Reads a JWK from a JSON object, taking the string members this type knows and ignoring the rest.
    /// Throws `.badInput` if `json` is not an object or a known member is not a string.
    public init(jsonObject json: JSONValue) throws {
        guard let members = json.objectValue else { throw KeyManagerError(.badInput, "a JWK must be a JSON object") }
        func member(_ name: String) throws -> String? {
            guard let value = members[name] else { return nil }
            guard let text = value.stringValue else {
                throw KeyManagerError(.badInput, "JWK member \"\(name)\" must be a string")
            }
            return text
        }
        self.init(
            kty: try member("kty"), crv: try member("crv"), x: try member("x"), y: try member("y"),
            d: try member("d"), n: try member("n"), e: try member("e"), use: try member("use"),
            alg: try member("alg"), kid: try member("kid"))
    }
}
