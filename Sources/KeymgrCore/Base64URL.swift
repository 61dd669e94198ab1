/// Base64url (RFC 4648 §5) without padding, as JOSE uses it (RFC 7515 §2).
package enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Encodes `bytes` as base64url with no `=` padding.
    package static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
            out.append(alphabet[Int(chunk >> 6 & 0x3F)])
            out.append(alphabet[Int(chunk & 0x3F)])
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let chunk = UInt32(bytes[index]) << 16
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
        case 2:
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
            out.append(alphabet[Int(chunk >> 6 & 0x3F)])
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url, or returns nil when `string` contains any character outside the base64url
    /// alphabet (including `=`, `+`, `/` and whitespace), has an impossible length, or is not the canonical
    /// encoding (unused trailing bits set), so every byte string has exactly one accepted encoding.
    package static func decode(_ string: String) -> [UInt8]? {
        let input = Array(string.utf8)
        guard input.count % 4 != 1 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in input {
            guard let value = sextet(character) else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        guard accumulator == 0 else { return nil }  // leftover bits must be zero
        return out
    }

    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return nil
        }
    }
}
