import Foundation

/// PingAM's universal ids (`id=dave,ou=user,o=alpha,ou=services,ou=am-config`): the `userId` its journeys give.
public enum UniversalId {
    /// The `id=` value of a universal id (up to its first unescaped comma, RFC 4514 escapes undone);
    /// nil when `userId` is not of that form.
    public static func idValue(_ userId: String) -> String? {
        guard userId.hasPrefix("id=") else { return nil }
        var bytes: [UInt8] = []
        var rest = Array(userId.utf8.dropFirst(3))[...]
        while let byte = rest.first {
            rest = rest.dropFirst()
            if byte == UInt8(ascii: ",") { return String(decoding: bytes, as: UTF8.self) }
            guard byte == UInt8(ascii: "\\"), let next = rest.first else {
                bytes.append(byte)
                continue
            }
            // `\,` escapes one character; `\2C` is a hex pair.
            if rest.count >= 2, let pair = UInt8(String(decoding: rest.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(pair)
                rest = rest.dropFirst(2)
            } else {
                bytes.append(next)
                rest = rest.dropFirst()
            }
        }
        return nil
    }
}
