/// One challenge of a `WWW-Authenticate` header (RFC 9110 §11.6.1): a scheme and either auth parameters or a
/// token68. keymgr reads two things from them: a DPoP challenge asking for a nonce (`DPoP error="use_dpop_nonce"`,
/// RFC 9449 §9) and a Basic challenge (a token endpoint refusing the client's credentials, RFC 6749 §5.2).
public struct HTTPChallenge: Sendable, Equatable {
    /// The auth scheme as sent (compare it case-insensitively).
    public var scheme: String
    /// The auth parameters, names lower-cased, quoted strings unquoted; the first of a repeated name wins.
    public var parameters: [String: String]
    /// The token68 form (`Negotiate abc==`), when the challenge has one instead of parameters.
    public var token68: String?

    public init(scheme: String, parameters: [String: String] = [:], token68: String? = nil) {
        self.scheme = scheme
        self.parameters = parameters
        self.token68 = token68
    }

    /// True when the scheme is `name`, case-insensitively.
    public func isScheme(_ name: String) -> Bool { scheme.lowercased() == name.lowercased() }

    /// Every challenge of a header value (several headers joined with ", " are one value). Never fails: what
    /// cannot be read is skipped.
    public static func parse(_ header: String) -> [HTTPChallenge] {
        var reader = Reader(bytes: Array(header.utf8))
        var challenges: [HTTPChallenge] = []
        while true {
            reader.skip { $0 == 0x20 || $0 == 0x09 || $0 == 0x2C }
            guard !reader.atEnd else { break }
            guard let scheme = reader.token() else {
                reader.index += 1  // not a token character where a scheme belongs: skip it
                continue
            }
            var challenge = HTTPChallenge(scheme: scheme)
            reader.skipWhitespace()
            let start = reader.index
            if let token68 = reader.token68() {
                reader.skipWhitespace()
                if reader.atEnd || reader.peek == 0x2C {
                    challenge.token68 = token68
                    challenges.append(challenge)
                    continue
                }
                reader.index = start
            }
            while true {
                reader.skipWhitespace()
                let nameStart = reader.index
                guard let name = reader.token() else { break }
                reader.skipWhitespace()
                guard reader.peek == 0x3D else {
                    reader.index = nameStart  // a token without "=" is the next challenge's scheme
                    break
                }
                reader.index += 1
                reader.skipWhitespace()
                let value = reader.peek == 0x22 ? reader.quotedString() : (reader.token() ?? "")
                let key = name.lowercased()
                if challenge.parameters[key] == nil { challenge.parameters[key] = value }
                reader.skipWhitespace()
                guard reader.peek == 0x2C else { break }
                reader.index += 1
            }
            challenges.append(challenge)
        }
        return challenges
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }
        var peek: UInt8? { atEnd ? nil : bytes[index] }

        mutating func skip(_ predicate: (UInt8) -> Bool) {
            while let byte = peek, predicate(byte) { index += 1 }
        }

        mutating func skipWhitespace() { skip { $0 == 0x20 || $0 == 0x09 } }

        mutating func token() -> String? {
            let start = index
            skip(HTTPSyntax.isTokenCharacter)
            return index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
        }

        /// `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
        mutating func token68() -> String? {
            let start = index
            skip { byte in
                switch byte {
                case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E, 0x2B, 0x2F: return true
                default: return false
                }
            }
            guard index > start else { return nil }
            skip { $0 == 0x3D }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        /// A quoted string from its opening quote, backslash escapes undone; an unterminated one runs to the end.
        mutating func quotedString() -> String {
            index += 1
            var out: [UInt8] = []
            while let byte = peek {
                index += 1
                if byte == 0x22 { break }
                if byte == 0x5C, let escaped = peek {
                    index += 1
                    out.append(escaped)
                } else {
                    out.append(byte)
                }
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

/// RFC 9110's shared syntax.
enum HTTPSyntax {
    /// tchar: `!#$%&'*+-.^_`|~`, digits and letters (field names, auth schemes and parameter names are tokens).
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: return true
        default: return false
        }
    }
}
