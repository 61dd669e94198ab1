import Foundation
import XCTest
@testable import KeyManager

/// `JSONValue.parseCommon`, the audit details reader: the value `JSONDecoder` gives, or nil (and the caller then
/// asks `JSONDecoder`), never a different value.
final class JSONValueParsingTests: XCTestCase {
    private func decoded(_ text: String) -> JSONValue? {
        try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    func testCommonTextParsesAsJSONDecoderDecodesIt() throws {
        let texts = [
            "{}", "[]", #"{"claims":[]}"#, #"{"authType":"APPLICATION_PIN","issuer":"keymgr","supersedes":["A","B"]}"#,
            #"{"users":4,"bindings":3,"days":-90}"#, #"{"a":true,"b":false,"c":null,"d":{"e":[1,[2,{}]]}}"#,
            #" { "spaced" : [ 1 , 2 ] } "#, #"{"Ünïcødé ✓ 😀":"quote-free text, commas, and / slashes"}"#,
            #"{"big":9223372036854775807,"small":-9223372036854775808,"zero":0,"minusZero":-0}"#,
        ]
        for text in texts {
            let common = try XCTUnwrap(JSONValue.parseCommon(text), text)
            XCTAssertEqual(common, decoded(text), text)
        }
    }

    func testAnythingElseIsLeftToJSONDecoder() {
        let texts = [
            #"{"escaped":"a\"b"}"#, #"{"unicode":"\u00e9"}"#, #"{"fraction":1.5}"#, #"{"exponent":1e3}"#,
            #"{"overflow":9223372036854775808}"#, #"{"leading":01}"#, #"{"dup":1,"dup":2}"#, #"{"open":"#, "[1,]",
            #"{"a":1}x"#, "tru", "-", "\"control\u{1}\"", "",
        ]
        for text in texts {
            XCTAssertNil(JSONValue.parseCommon(text), text)
        }
    }
}
