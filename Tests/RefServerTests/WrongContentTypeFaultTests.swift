import Foundation
import XCTest

@testable import RefServer

/// The `wrongContentType` fault: an HTML page with 200 where the device REST's JSON should be.
final class WrongContentTypeFaultTests: ServerTestCase {
    func testWrongContentTypeAnswersHTMLForThatUserOnly() async throws {
        _ = try await seedDevice(user: "alice")
        await server.setFault(.wrongContentType, forUser: "alice", count: 1)
        let result = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(result.status, 200)
        XCTAssertTrue(result.header("Content-Type")?.hasPrefix("text/html") == true, "\(String(describing: result.header("Content-Type")))")
        XCTAssertThrowsError(try JSONSerialization.jsonObject(with: result.body))
        let other = try await send("GET", devicesURL(user: "bob"), headers: deviceHeaders)
        XCTAssertEqual(other.status, 200)
        let again = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertTrue(again.header("Content-Type")?.hasPrefix("application/json") == true, "count 1 expires")
        XCTAssertEqual(Fault(json: .object(["fault": .string("wrongContentType")])), .wrongContentType)
    }
}
