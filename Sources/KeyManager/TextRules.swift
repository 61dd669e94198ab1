import AgentWire
import Foundation

/// The rules of text a person or a server gives keymgr that it stores and shows again (user ids, usernames, realm
/// paths): one place, so every command that stores such text refuses the same values.
public enum TextRules {
    /// The most bytes (UTF-8) of one identifier.
    public static let maxIdentifierBytes = 1024

    /// A user id and, if given, a username, as every command that stores a user checks them (`bind`, `bind
    /// --journey`, `dcr register`, `login`, `token import`).
    /// - Throws: `usage` for a blank user id; `badInput` for anything `checkIdentifier` refuses.
    public static func checkUser(userId: String, username: String?) throws {
        try checkIdentifier(userId, what: "user id")
        if let username { try checkIdentifier(username, what: "username") }
    }

    /// Not blank; at most `maxIdentifierBytes` bytes; no C0 or C1 control character (ESC included), no
    /// bidirectional control and no U+FFFD (the mark of bytes that were not valid UTF-8), which would make the text
    /// print other than it is, or move a terminal's cursor, when keymgr lists it.
    public static func checkIdentifier(_ value: String, what: String) throws {
        guard !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw KeyManagerError(.usage, "the \(what) must not be empty or blank")
        }
        guard value.utf8.count <= maxIdentifierBytes else {
            throw KeyManagerError(.badInput, "the \(what) is longer than \(maxIdentifierBytes) bytes")
        }
        guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }) else {
            throw KeyManagerError(.badInput, "the \(what) contains control characters")
        }
        guard !value.unicodeScalars.contains(where: { PrintableText.bidiControls.contains($0.value) }) else {
            throw KeyManagerError(.badInput, "the \(what) contains a bidirectional control character (such as U+202E), "
                + "which makes text display other than it is")
        }
        guard !value.unicodeScalars.contains("\u{FFFD}") else {
            throw KeyManagerError(.badInput, "the \(what) contains U+FFFD, the mark of bytes that were not valid UTF-8")
        }
    }
}
