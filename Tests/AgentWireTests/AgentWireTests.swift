import AgentWire
import XCTest

/// The protocol's frames: what the client writes, the agent reads back unchanged; what is not exactly a frame of
/// the protocol is refused with a reason.
final class AgentWireTests: XCTestCase {
    private func decode(_ text: String) throws -> AgentRequest { try AgentRequest.decode(Array(text.utf8)) }

    private func assertRefused(_ text: String, _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        assertRefused(Array(text.utf8), fragment, file: file, line: line)
    }

    private func assertRefused(_ bytes: [UInt8], _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let request = try AgentRequest.decode(bytes)
            XCTFail("accepted \(String(decoding: bytes, as: UTF8.self)) as \(request)", file: file, line: line)
        } catch {
            XCTAssertTrue(error.message.contains(fragment), "\(error.message) lacks \(fragment)", file: file, line: line)
        }
    }

    func testTheBriefsExampleRequestDecodes() throws {
        let request = try decode(#"{"version":1,"arguments":["sign","--user","alice"],"fds":[0,1,2],"terminal":false,"columns":120}"#)
        XCTAssertEqual(request, AgentRequest(arguments: ["sign", "--user", "alice"], fds: [0, 1, 2], terminal: false, columns: 120))
    }

    func testEncodedRequestsDecodeToThemselves() throws {
        let strange = ["sign", "--claim", "note=\"quoted\" \\ back\nslash\t\u{1}\u{7F}é€😀", "", "--user", "名前"]
        for request in [
            AgentRequest(arguments: strange, fds: [0, 1, 2, 5, 7], terminal: true, columns: 200),
            AgentRequest(arguments: [], fds: [2, 0, 1]),
            AgentRequest(arguments: ["status"], fds: [0, 1, 2, 3, 4, 5, 6, 7]),
        ] {
            let bytes = request.encoded()
            XCTAssertEqual(try AgentRequest.decode(bytes), request, String(decoding: bytes, as: UTF8.self))
        }
        XCTAssertEqual(String(decoding: AgentRequest(arguments: ["a\"b"], columns: 9).encoded(), as: UTF8.self),
                       #"{"version":1,"arguments":["a\"b"],"fds":[0,1,2],"terminal":false,"columns":9}"#)
    }

    func testResponsesRoundTripAndAreChecked() throws {
        let plain = AgentResponse(status: 0)
        XCTAssertEqual(String(decoding: plain.encoded(), as: UTF8.self), #"{"status":0}"#)
        let denied = AgentResponse(status: 77, error: .init(code: "denied", message: "no rule lets \"bob\"\nsign"))
        XCTAssertEqual(try AgentResponse.decode(denied.encoded()), denied)
        XCTAssertEqual(try AgentResponse.decode(Array(#" {"extra":[1,{"x":null}],"status":75} "#.utf8)), AgentResponse(status: 75))
        for bad in [#"{"status":256}"#, #"{"status":-1}"#, #"{"status":"0"}"#, #"{}"#, #"{"status":1,"error":{"code":"x"}}"#,
                    #"{"status":1,"status":2}"#, #"{"status":1.0}"#] {
            XCTAssertThrowsError(try AgentResponse.decode(Array(bad.utf8)), bad)
        }
    }

    func testUnknownMembersAreIgnoredAndTerminalAndColumnsAreOptional() throws {
        let request = try decode(#"{"fds":[0,1,2],"future":{"a":[true,null,-1.5e3,"x"]},"arguments":["status"],"version":1}"#)
        XCTAssertEqual(request, AgentRequest(arguments: ["status"], fds: [0, 1, 2], terminal: false, columns: nil))
    }

    func testTheVersionIsCheckedFirst() {
        assertRefused(#"{"arguments":["status"],"fds":[0,1,2]}"#, "no \"version\"")
        assertRefused(#"{"version":"1","arguments":["status"],"fds":[0,1,2]}"#, "not an integer")
        do {
            _ = try AgentRequest.decode(Array(#"{"version":2,"whatever":true}"#.utf8))
            XCTFail("version 2 accepted")
        } catch {
            XCTAssertTrue(error.unsupportedVersion)
            XCTAssertTrue(error.message.contains("protocol version 2 is not supported"), error.message)
        }
    }

    func testMembersOfTheWrongShapeAreRefused() {
        assertRefused(#"{"version":1,"fds":[0,1,2]}"#, "\"arguments\" is missing")
        assertRefused(#"{"version":1,"arguments":["a",1],"fds":[0,1,2]}"#, "other than a string")
        assertRefused(#"{"version":1,"arguments":["a\u0000b"],"fds":[0,1,2]}"#, "NUL")
        assertRefused(#"{"version":1,"arguments":[]}"#, "\"fds\" is missing")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1]}"#, "lacks 2")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2,2]}"#, "names 2 twice")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2,-3]}"#, "descriptor number")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2,3.5]}"#, "descriptor number")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2,256]}"#, "descriptor number from 0 to 255")
        XCTAssertEqual(try decode(#"{"version":1,"arguments":[],"fds":[0,1,2,255],"columns":100000}"#).fds, [0, 1, 2, 255])
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"columns":100001}"#, "\"columns\"")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2,3,4,5,6,7,8]}"#, "at most 8")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"terminal":1}"#, "\"terminal\"")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"columns":0}"#, "\"columns\"")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"columns":"80"}"#, "\"columns\"")
        assertRefused(#"["version",1]"#, "not a JSON object")
    }

    func testJSONThatTwoReadersCouldReadDifferentlyIsRefused() {
        assertRefused(#"{"version":1,"version":1,"arguments":[],"fds":[0,1,2]}"#, "twice")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"x":1,"x":2}"#, "twice")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2]} {}"#, "bytes after")
        assertRefused(#"{"version":01,"arguments":[],"fds":[0,1,2]}"#, "leading zero")
        assertRefused(#"{"version":1,"arguments":["\ud800"],"fds":[0,1,2]}"#, "surrogate")
        assertRefused(#"{"version":1,"arguments":["\udc00x"],"fds":[0,1,2]}"#, "surrogate")
        assertRefused(#"{"version":1,"arguments":["\x"],"fds":[0,1,2]}"#, "invalid escape")
        assertRefused("{\"version\":1,\"arguments\":[\"a\tb\"],\"fds\":[0,1,2]}", "control character")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],}"#, "member name")
        assertRefused(#"{"version":1,"arguments":[,],"fds":[0,1,2]}"#, "unexpected character")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2]"#, "expected ',' or '}'")
        assertRefused(#"{"version":1,"arguments":["abc"#, "unterminated")
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"x":tru}"#, "unexpected character")
        let deep = String(repeating: "[", count: 20) + String(repeating: "]", count: 20)
        assertRefused(#"{"version":1,"arguments":[],"fds":[0,1,2],"x":\#(deep)}"#, "nesting")
        // Invalid UTF-8: a lone continuation byte, an overlong '/', a UTF-16 surrogate, a code point over U+10FFFF.
        for bad: [UInt8] in [[0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82]] {
            let bytes = Array(#"{"version":1,"arguments":[""#.utf8) + bad + Array(#""],"fds":[0,1,2]}"#.utf8)
            assertRefused(bytes, "not valid UTF-8")
        }
        assertRefused([], "unexpected end")
    }

    func testFrameHeadersAreCheckedAgainstTheLimits() throws {
        XCTAssertEqual(AgentWire.frame([0x7B, 0x7D]), [0, 0, 0, 2, 0x7B, 0x7D])
        XCTAssertEqual(try AgentWire.bodyLength(header: [0, 1, 0, 0]), 65536)
        XCTAssertEqual(try AgentWire.bodyLength(header: [0, 0, 0, 1]), 1)
        XCTAssertThrowsError(try AgentWire.bodyLength(header: [0, 1, 0, 1]))
        XCTAssertThrowsError(try AgentWire.bodyLength(header: [0, 0, 0, 0]))
        XCTAssertThrowsError(try AgentWire.bodyLength(header: [0xFF, 0xFF, 0xFF, 0xFF]))
        XCTAssertThrowsError(try AgentWire.bodyLength(header: [0, 0, 1]))
    }
}
