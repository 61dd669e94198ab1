import Foundation
import XCTest

@testable import RefServer

final class DeviceRESTTests: ServerTestCase {
    func testUnknownUserListsNothing() async throws {
        let result = try await send("GET", devicesURL(user: "nobody"), headers: deviceHeaders)
        XCTAssertEqual(result.status, 200)
        let body = try result.object()
        XCTAssertEqual((body["result"] as? [Any])?.count, 0)
        XCTAssertEqual(body["resultCount"] as? Int, 0)
        XCTAssertTrue(body["pagedResultsCookie"] is NSNull)
        XCTAssertEqual(body["totalPagedResultsPolicy"] as? String, "NONE")
        XCTAssertEqual(body["totalPagedResults"] as? Int, -1)
        XCTAssertEqual(body["remainingPagedResults"] as? Int, -1)
    }

    func testRecordHasPingAMFields() async throws {
        let device = try await seedDevice(user: "alice")
        let body = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders).object()
        let record = try XCTUnwrap((body["result"] as? [[String: Any]])?.first)
        XCTAssertEqual(
            Set(record.keys),
            ["_id", "_rev", "uuid", "deviceId", "deviceName", "createdDate", "lastAccessDate", "key",
             "deviceManagementStatus"])
        XCTAssertEqual(record["_id"] as? String, device.uuid)
        XCTAssertEqual(record["uuid"] as? String, device.uuid)
        XCTAssertEqual((record["key"] as? [String: String])?["kid"], device.uuid)
        XCTAssertEqual(record["createdDate"] as? Int, 1_700_000_000_000)
        XCTAssertEqual(record["deviceManagementStatus"] as? Bool, false)
    }

    func testPagingOverFiveRecordsGivesThreePages() async throws {
        var seeded: [String] = []
        for index in 0..<5 { seeded.append(try await seedDevice(user: "alice", name: "d\(index)").uuid) }
        _ = try await seedDevice(user: "bob")

        var listed: [String] = []
        var cookie: String?
        var pages = 0
        repeat {
            var query = "_queryFilter=true&_pageSize=2"
            if let cookie { query += "&_pagedResultsCookie=" + PathEncoding.segment(cookie) }
            let body = try await send("GET", devicesURL(user: "alice", query: query), headers: deviceHeaders).object()
            let records = try XCTUnwrap(body["result"] as? [[String: Any]])
            pages += 1
            XCTAssertEqual(body["resultCount"] as? Int, records.count)
            XCTAssertEqual(records.count, pages < 3 ? 2 : 1)
            listed += records.compactMap { $0["uuid"] as? String }
            cookie = body["pagedResultsCookie"] as? String
            if pages == 3 { XCTAssertTrue(body["pagedResultsCookie"] is NSNull) }
        } while cookie != nil && pages < 10
        XCTAssertEqual(pages, 3)
        XCTAssertEqual(listed, seeded)
    }

    func testBadPagingParametersAreRefused() async throws {
        let badSize = try await send(
            "GET", devicesURL(user: "alice", query: "_queryFilter=true&_pageSize=-1"), headers: deviceHeaders)
        XCTAssertEqual(badSize.status, 400)
        let badCookie = try await send(
            "GET", devicesURL(user: "alice", query: "_queryFilter=true&_pagedResultsCookie=%25%25"),
            headers: deviceHeaders)
        XCTAssertEqual(badCookie.status, 400)
        let noFilter = try await send("GET", devicesURL(user: "alice", query: nil), headers: deviceHeaders)
        XCTAssertEqual(noFilter.status, 400)
    }

    func testPercentEncodedUserSegmentRoundTrips() async throws {
        let user = "a/b ..?# c"
        let device = try await seedDevice(user: user)
        _ = try await seedDevice(user: "a")

        let url = devicesURL(user: user)
        XCTAssertTrue(url.absoluteString.contains("/users/a%2Fb%20..%3F%23%20c/devices/2fa/binding?"))
        let body = try await send("GET", url, headers: deviceHeaders).object()
        let uuids = (body["result"] as? [[String: Any]])?.compactMap { $0["uuid"] as? String }
        XCTAssertEqual(uuids, [device.uuid])
        let requests = await server.recordedRequests()
        XCTAssertEqual(requests.last?.target.contains("a%2Fb%20..%3F%23%20c"), true)

        let deleted = try await send("DELETE", devicesURL(user: user, uuid: device.uuid, query: nil), headers: deviceHeaders)
        XCTAssertEqual(deleted.status, 200)
        let remaining = try await server.devices(user: user)
        XCTAssertTrue(remaining.isEmpty)
        let other = try await server.devices(user: "a")
        XCTAssertEqual(other.count, 1)
    }

    func testRenameWithIfMatch() async throws {
        let device = try await seedDevice(user: "alice", name: "old name")
        var headers = deviceHeaders
        headers["If-Match"] = "*"
        let result = try await send(
            "PUT", devicesURL(user: "alice", uuid: device.uuid, query: nil), headers: headers,
            json: ["deviceName": "front desk"])
        XCTAssertEqual(result.status, 200)
        let record = try result.object()
        XCTAssertEqual(record["deviceName"] as? String, "front desk")
        XCTAssertEqual(record["uuid"] as? String, device.uuid)
        XCTAssertNotEqual(record["_rev"] as? String, device.revision)
        let stored = try await server.devices(user: "alice")
        XCTAssertEqual(stored.first?.deviceName, "front desk")
        XCTAssertEqual(stored.first?.key, device.key)
        let put = await server.recordedRequests().last
        XCTAssertEqual(put?.headers["if-match"], "*")

        headers["If-Match"] = "\"12345\""
        let stale = try await send(
            "PUT", devicesURL(user: "alice", uuid: device.uuid, query: nil), headers: headers,
            json: ["deviceName": "again"])
        XCTAssertEqual(stale.status, 412)
        XCTAssertEqual(try stale.object()["reason"] as? String, "Precondition Failed")

        // Common REST maps a PUT without If-Match to an update without a revision check.
        headers["If-Match"] = nil
        let unconditional = try await send(
            "PUT", devicesURL(user: "alice", uuid: device.uuid, query: nil), headers: headers,
            json: ["deviceName": "no precondition"])
        XCTAssertEqual(unconditional.status, 200)
        XCTAssertEqual(try unconditional.object()["deviceName"] as? String, "no precondition")

        // If-None-Match: * asks for a create, which bound devices do not support.
        headers["If-None-Match"] = "*"
        let create = try await send(
            "PUT", devicesURL(user: "alice", uuid: "new-uuid", query: nil), headers: headers,
            json: ["deviceName": "x"])
        XCTAssertEqual(create.status, 501)
    }

    func testRenameRefusesNonJSONContentAndUnknownUUID() async throws {
        let device = try await seedDevice(user: "alice")
        var headers = deviceHeaders
        headers["If-Match"] = "*"
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        let form = try await send(
            "PUT", devicesURL(user: "alice", uuid: device.uuid, query: nil), headers: headers,
            json: ["deviceName": "x"])
        XCTAssertEqual(form.status, 400)
        headers["Content-Type"] = "application/json"
        let unknown = try await send(
            "PUT", devicesURL(user: "alice", uuid: "no-such-uuid", query: nil), headers: headers,
            json: ["deviceName": "x"])
        XCTAssertEqual(unknown.status, 404)
        let otherUser = try await send(
            "PUT", devicesURL(user: "bob", uuid: device.uuid, query: nil), headers: headers,
            json: ["deviceName": "x"])
        XCTAssertEqual(otherUser.status, 404)
    }

    func testDeleteReturnsRecordThen404() async throws {
        let device = try await seedDevice(user: "alice")
        let url = devicesURL(user: "alice", uuid: device.uuid, query: nil)
        let first = try await send("DELETE", url, headers: deviceHeaders)
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(try first.object()["_id"] as? String, device.uuid)
        let second = try await send("DELETE", url, headers: deviceHeaders)
        XCTAssertEqual(second.status, 404)
        let error = try second.object()
        XCTAssertEqual(error["code"] as? Int, 404)
        XCTAssertEqual(error["reason"] as? String, "Not Found")
        XCTAssertNotNil(error["message"] as? String)
    }

    func testMissingOrWrongAdminCredentialIs401() async throws {
        let url = devicesURL(user: "alice")
        for headers in [
            ["Accept-API-Version": "resource=1.0"],
            ["Accept-API-Version": "resource=1.0", "Authorization": "Bearer wrong"],
            ["Accept-API-Version": "resource=1.0", "Authorization": adminToken],
            ["Accept-API-Version": "resource=1.0", "iPlanetDirectoryPro": "wrong"],
        ] {
            let result = try await send("GET", url, headers: headers)
            XCTAssertEqual(result.status, 401, "\(headers)")
            let error = try result.object()
            XCTAssertEqual(error["code"] as? Int, 401)
            XCTAssertEqual(error["reason"] as? String, "Unauthorized")
        }
        let session = try await send(
            "GET", url, headers: ["Accept-API-Version": "resource=1.0", "iPlanetDirectoryPro": adminToken])
        XCTAssertEqual(session.status, 200)
    }

    func testMissingOrWrongAcceptAPIVersionIs400() async throws {
        let url = devicesURL(user: "alice")
        for version in [nil, "protocol=1.0", "resource=2.0"] {
            var headers = ["Authorization": "Bearer \(adminToken)"]
            headers["Accept-API-Version"] = version
            let result = try await send("GET", url, headers: headers)
            XCTAssertEqual(result.status, 400, version ?? "no header")
            let error = try result.object()
            XCTAssertEqual(error["code"] as? Int, 400)
            XCTAssertEqual(error["reason"] as? String, "Bad Request")
        }
        let plain = try await send(
            "GET", url, headers: ["Authorization": "Bearer \(adminToken)", "Accept-API-Version": "resource=1.0"])
        XCTAssertEqual(plain.status, 200)
    }

    func testUnknownRealmAndPathAre404() async throws {
        let realm = URL(string: server.baseURL.absoluteString + "/json/realms/root/realms/nope/users/a/devices/2fa/binding?_queryFilter=true")!
        let unknownRealm = try await send("GET", realm, headers: deviceHeaders)
        XCTAssertEqual(unknownRealm.status, 404)
        let path = try await send("GET", server.baseURL.appendingPathComponent("json/elsewhere"), headers: deviceHeaders)
        XCTAssertEqual(path.status, 404)
        XCTAssertEqual(try path.object()["code"] as? Int, 404)
    }
}
