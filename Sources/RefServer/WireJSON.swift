import Foundation
import KeymgrCore

/// The server reads and writes JSON with keymgr's `JSONValue`: `Sendable`, and explicit about every field's type.
extension JSONValue {
    /// Decodes JSON text; throws on malformed input.
    static func parse(_ bytes: some Collection<UInt8>) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
    }

    /// Compact JSON with sorted object keys (stable output for tests and diffs).
    func encoded() -> Data {
        Data(canonicalJSON().utf8)
    }
}
