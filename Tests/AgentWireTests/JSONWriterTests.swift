import AgentWire
import XCTest

/// keymgr's one JSON writer and printable-text filter: what the agent's frames, the client's error document,
/// keymgr-core's streamed JSON and canonical JSON escape.
final class JSONWriterTests: XCTestCase {
    private func written(_ text: String, escapingInvisibles: Bool) -> String {
        var writer = JSONWriter()
        writer.string(text, escapingInvisibles: escapingInvisibles)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    func testC0IsAlwaysEscapedAsJSONEncoderDoes() throws {
        let text = "a\"b\\c/d\u{08}\u{09}\u{0A}\u{0C}\u{0D}\u{00}\u{1F}é"
        let expected = #""a\"b\\c/d\b\t\n\f\r\u0000\u001fé""#
        XCTAssertEqual(written(text, escapingInvisibles: false), expected)
        XCTAssertEqual(written(text, escapingInvisibles: true), expected)
        // What JSONEncoder writes for the same string (without escaping slashes), byte for byte.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        XCTAssertEqual(String(decoding: try encoder.encode(text), as: UTF8.self), expected)
    }

    func testInvisiblesAreEscapedOnlyWhenAsked() {
        let text = "x\u{7F}\u{80}\u{9F}\u{A0}\u{061C}\u{200E}\u{2010}\u{202E}\u{2069}\u{2070}y"
        XCTAssertEqual(written(text, escapingInvisibles: false), "\"\(text)\"")
        XCTAssertEqual(written(text, escapingInvisibles: true),
                       #""x\u007f\u0080\u009f"# + "\u{A0}" + #"\u061c\u200e"# + "\u{2010}" + #"\u202e\u2069"# + "\u{2070}y\"")
    }

    func testEveryScalarTheFilterStripsIsOneTheWriterEscapes() {
        for value in UInt32(0)...0x2100 {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let text = String(Character(scalar))
            let stripped = PrintableText.stripped(text, keepingLineBreaks: false).isEmpty
            let escaped = written(text, escapingInvisibles: true).contains("\\")
            XCTAssertEqual(stripped, PrintableText.isInvisible(value), "U+\(String(value, radix: 16))")
            if stripped { XCTAssertTrue(escaped, "U+\(String(value, radix: 16)) is stripped but written as is") }
        }
        XCTAssertEqual(PrintableText.stripped("a\tb\nc\u{1B}[2J\u{202E}d"), "a\tb\nc[2Jd")
    }
}
