import Foundation
import KeyManager
@testable import ServerClients
import XCTest

/// PingAM's device REST on the wire, against a stub HTTP client: paths, headers, paging, errors.
final class PingAMDeviceClientTests: XCTestCase {
    func testUserSegmentIsOneEncodedSegment() {
        XCTAssertEqual(PingAMDeviceClient.userSegment("id=demo,ou=user,o=alpha,ou=services,ou=am-config"), "demo")
        // RFC 4514 escapes in the id= value are undone: the server's user is "smith, j+r".
        XCTAssertEqual(PingAMDeviceClient.userSegment(#"id=smith\, j\+r,ou=user,ou=am-config"#), "smith%2C%20j%2Br")
        XCTAssertEqual(PingAMDeviceClient.userSegment(#"id=a\2Cb,ou=user,ou=am-config"#), "a%2Cb")
        let hostile = "a/b ..?#c"
        let segment = PingAMDeviceClient.userSegment(hostile)
        XCTAssertFalse(segment.contains("/") || segment.contains("?") || segment.contains("#") || segment.contains(" ")
                       || segment.contains("."), segment)
        XCTAssertEqual(segment.removingPercentEncoding, hostile)
    }
}

/// What a server sends can be anything: absurd dates in a listing must not crash keymgr.
final class HostileListingTests: XCTestCase {
    func testAbsurdDatesInAListingAreIgnoredNotFatal() throws {
        let body = """
            {"result":[
              {"_id":"k1","uuid":"k1","deviceId":"d","key":{"kid":"k1"},"createdDate":9223372036854775807,"lastAccessDate":-9223372036854775807},
              {"_id":"k2","uuid":"k2","deviceId":"d","key":{"kid":"k2"},"createdDate":1.0e300,"lastAccessDate":1795000000123}
            ],"resultCount":2,"pagedResultsCookie":null}
            """
        let page = try PingAMDeviceClient.decodePage(Data(body.utf8))
        XCTAssertEqual(page.devices.map(\.kid), ["k1", "k2"])
        XCTAssertNil(page.devices[0].createdAt)
        XCTAssertNil(page.devices[0].lastAccessAt)
        XCTAssertNil(page.devices[1].createdAt)
        XCTAssertEqual(page.devices[1].lastAccessAt, Date(timeIntervalSince1970: 1_795_000_000.123))
    }
}
