import Foundation
import KeyManager
@testable import ServerClients
import XCTest

/// PingAM's device REST on the wire, against a stub HTTP client: paths, headers, paging, errors.
final class PingAMDeviceClientTests: XCTestCase {
    private let server = PingAMServer(baseURL: URL(string: "https://am.example.com/am/")!, realmPath: "/realms/root/realms/alpha")

    private func client(_ stub: StubHTTPClient) -> PingAMDeviceClient {
        var client = PingAMDeviceClient(server: server, http: stub, adminHeader: ("iPlanetDirectoryPro", "admin-session"))
        client.pageSize = 2
        return client
    }

    private static func page(_ kids: [String], cookie: String?) -> String {
        let records = kids.map { #"{"_id":"\#($0)","uuid":"\#($0)","deviceId":"dev","deviceName":"kiosk","key":{"kid":"\#($0)"},"createdDate":1795000000000}"# }
        return #"{"result":[\#(records.joined(separator: ","))],"resultCount":\#(kids.count),"pagedResultsCookie":\#(cookie.map { "\"\($0)\"" } ?? "null")}"#
    }

    func testListingFollowsPagingCookiesWithTheAdminHeaderAndAPIVersion() async throws {
        let stub = StubHTTPClient { request in
            let query = request.url.query ?? ""
            return query.contains("_pagedResultsCookie=next") ? StubHTTPClient.json(200, Self.page(["k3"], cookie: nil))
                : StubHTTPClient.json(200, Self.page(["k1", "k2"], cookie: "next"))
        }
        let devices = try await client(stub).listDevices(userId: "id=dave,ou=user,ou=am-config")
        XCTAssertEqual(devices.map(\.kid), ["k1", "k2", "k3"])
        XCTAssertEqual(devices.first?.deviceName, "kiosk")
        XCTAssertEqual(devices.first?.createdAt, Date(timeIntervalSince1970: 1_795_000_000))
        let requests = stub.requests
        XCTAssertEqual(requests.count, 2)
        for request in requests {
            XCTAssertEqual(request.method, "GET")
            XCTAssertEqual(request.url.path, "/am/json/realms/root/realms/alpha/users/dave/devices/2fa/binding")
            XCTAssertEqual(request.headers["Accept-API-Version"], "resource=1.0")
            XCTAssertEqual(request.headers["iPlanetDirectoryPro"], "admin-session")
            XCTAssertTrue(request.url.query?.contains("_queryFilter=true") == true, request.url.absoluteString)
            XCTAssertTrue(request.url.query?.contains("_pageSize=2") == true, request.url.absoluteString)
        }
    }

    func testARepeatedPagingCookieIsAnIncompleteListing() async throws {
        let stub = StubHTTPClient { _ in StubHTTPClient.json(200, Self.page(["k1"], cookie: "same")) }
        do {
            _ = try await client(stub).listDevices(userId: "alice")
            XCTFail("an endless listing was accepted")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .malformed)
            XCTAssertEqual(error.code, .badInput)
        }
        XCTAssertEqual(stub.requests.count, 2, "the second page's repeated cookie ends it")
    }

    func testStatusesMapToTheTaxonomy() async throws {
        let cases: [(Int, TransportError.Kind, KeyManagerError.Code)] = [
            (500, .unavailable, .serverUnavailable), (401, .credentialRefused, .unAuthorize),
            (403, .credentialRefused, .unAuthorize), (400, .rejected, .serverRejected),
        ]
        for (status, kind, code) in cases {
            let stub = StubHTTPClient { _ in StubHTTPClient.json(status, #"{"code":\#(status),"message":"no"}"#) }
            do {
                _ = try await client(stub).listDevices(userId: "alice")
                XCTFail("HTTP \(status) was accepted")
            } catch let error as TransportError {
                XCTAssertEqual(error.kind, kind, "HTTP \(status)")
                XCTAssertEqual(error.code, code, "HTTP \(status)")
                XCTAssertFalse(error.message.contains("admin-session"), "the credential never reaches a message")
            }
        }
    }

    func test503IsRetriedHonouringRetryAfterThenFails() async throws {
        let stub = StubHTTPClient { _ in HTTPResponse(status: 503, headers: ["retry-after": "0"]) }
        do {
            _ = try await client(stub).listDevices(userId: "alice")
            XCTFail("a listing that always answers 503 was accepted")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .unavailable)
        }
        XCTAssertEqual(stub.requests.count, 3, "three attempts, then the user's listing fails for this run")
    }

    func testDeleteTreats404AsGoneAndSendsTheUUIDAsOneSegment() async throws {
        let stub = StubHTTPClient { _ in HTTPResponse(status: 404) }
        try await client(stub).deleteDevice(userId: "alice", uuid: "a/b")
        XCTAssertEqual(stub.requests.first?.method, "DELETE")
        XCTAssertTrue(stub.requests.first?.url.absoluteString.hasSuffix("/binding/a%2Fb") == true,
                      stub.requests.first?.url.absoluteString ?? "")
    }
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

    func testRenamePutsTheWholeDeviceObjectWithIfMatchStar() async throws {
        let stub = StubHTTPClient { _ in StubHTTPClient.json(200, "{}") }
        let listed = ServerDevice(uuid: "k1", kid: "k1", deviceId: "dev-1", deviceName: "kiosk",
                                  createdAt: Date(timeIntervalSince1970: 1_795_000_000),
                                  lastAccessAt: Date(timeIntervalSince1970: 1_795_000_100.5))
        try await client(stub).renameDevice(userId: "id=dave,ou=user,ou=am-config", device: listed, to: "front desk")
        let request = try XCTUnwrap(stub.requests.first)
        XCTAssertEqual(request.method, "PUT")
        XCTAssertEqual(request.url.path, "/am/json/realms/root/realms/alpha/users/dave/devices/2fa/binding/k1")
        XCTAssertEqual(request.headers["If-Match"], "*")
        XCTAssertEqual(request.headers["Accept-API-Version"], "resource=1.0")
        let body = try JSONDecoder().decode(JSONValue.self, from: request.body ?? Data())
        XCTAssertEqual(body, .object([
            "_id": .string("k1"), "uuid": .string("k1"), "deviceId": .string("dev-1"), "deviceName": .string("front desk"),
            "createdDate": .int(1_795_000_000_000), "lastAccessDate": .int(1_795_000_100_500),
        ]))
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
