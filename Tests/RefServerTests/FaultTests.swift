import Foundation
import XCTest

@testable import RefServer

final class FaultTests: ServerTestCase {
    func testStatus500() async throws {
        await server.setFault(.status500, forUser: "alice")
        let result = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(result.status, 500)
        let error = try result.object()
        XCTAssertEqual(error["code"] as? Int, 500)
        XCTAssertEqual(error["reason"] as? String, "Internal Server Error")
        let other = try await send("GET", devicesURL(user: "bob"), headers: deviceHeaders)
        XCTAssertEqual(other.status, 200, "faults are per user")
    }

    func testStatus503CarriesRetryAfterAndCountExpires() async throws {
        await server.setFault(.status503(retryAfter: 7), forUser: "alice", count: 1)
        let first = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(first.status, 503)
        XCTAssertEqual(first.header("Retry-After"), "7")
        let second = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(second.status, 200)
        let faults = await server.faults()
        XCTAssertTrue(faults.isEmpty)
    }

    func testDelay() async throws {
        await server.setFault(.delay(seconds: 0.6), forUser: "alice")
        let started = Date()
        let result = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(result.status, 200)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.6)
    }

    func testMalformedJSON() async throws {
        _ = try await seedDevice(user: "alice")
        await server.setFault(.malformedJSON, forUser: "alice")
        let result = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(result.status, 200)
        XCTAssertTrue(result.header("Content-Type")?.hasPrefix("application/json") == true)
        XCTAssertThrowsError(try JSONSerialization.jsonObject(with: result.body))
    }

    func testEndlessPagingNeverEnds() async throws {
        for _ in 0..<3 { _ = try await seedDevice(user: "alice") }
        await server.setFault(.endlessPaging, forUser: "alice")
        var cookies: Set<String> = []
        var cookie: String?
        for _ in 0..<6 {
            var query = "_queryFilter=true&_pageSize=2"
            if let cookie { query += "&_pagedResultsCookie=" + PathEncoding.segment(cookie) }
            let body = try await send("GET", devicesURL(user: "alice", query: query), headers: deviceHeaders).object()
            cookie = try XCTUnwrap(body["pagedResultsCookie"] as? String, "every page has a cookie")
            cookies.insert(cookie ?? "")
        }
        XCTAssertEqual(cookies.count, 6, "every page returns a new cookie")
    }

    func testHugeBodyIsTenMiBAndStillTheRightListing() async throws {
        let device = try await seedDevice(user: "alice")
        await server.setFault(.hugeBody, forUser: "alice")
        let result = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders, timeout: 60)
        XCTAssertEqual(result.status, 200)
        XCTAssertGreaterThanOrEqual(result.body.count, 10 * 1024 * 1024)
        let records = try result.object()["result"] as? [[String: Any]]
        XCTAssertEqual(records?.compactMap { $0["uuid"] as? String }, [device.uuid])
    }

    func testClearFaults() async throws {
        await server.setFault(.status500, forUser: "alice")
        await server.setFault(.status500, forUser: "bob")
        await server.clearFault(forUser: "alice")
        let alice = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(alice.status, 200)
        await server.clearFaults()
        let bob = try await send("GET", devicesURL(user: "bob"), headers: deviceHeaders)
        XCTAssertEqual(bob.status, 200)
    }

    func testFaultsOverAdminHTTP() async throws {
        let admin = ["Authorization": "Bearer \(adminToken)"]
        let set = try await send(
            "PUT", adminURL("faults/alice"), headers: admin, json: ["fault": "delay", "seconds": 0.2])
        XCTAssertEqual(set.status, 200)
        let listed = try await send("GET", adminURL("faults"), headers: admin).object()
        XCTAssertEqual(((listed["faults"] as? [String: Any])?["alice"] as? [String: Any])?["fault"] as? String, "delay")
        let bad = try await send("PUT", adminURL("faults/alice"), headers: admin, json: ["fault": "explode"])
        XCTAssertEqual(bad.status, 400)
        _ = try await send("PUT", adminURL("faults/alice"), headers: admin, json: ["fault": "status500"])
        let failing = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(failing.status, 500)
        let cleared = try await send("DELETE", adminURL("faults/alice"), headers: admin)
        XCTAssertEqual(cleared.status, 204)
        let ok = try await send("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(ok.status, 200)
    }
}

final class AdminSurfaceTests: ServerTestCase {
    func testAdminRequiresCredential() async throws {
        let result = try await send("GET", adminURL("devices"))
        XCTAssertEqual(result.status, 401)
        XCTAssertEqual(try result.object()["code"] as? Int, 401)
        let health = try await send("GET", adminURL("health"))
        XCTAssertEqual(health.status, 200)
    }

    func testUsersAndDevicesOverAdminHTTP() async throws {
        let admin = ["iPlanetDirectoryPro": adminToken]
        let created = try await send(
            "POST", adminURL("users"), headers: admin, json: ["username": "demo", "password": "pw"])
        XCTAssertEqual(created.status, 201)
        let users = try await server.users()
        XCTAssertEqual(users, [ReferenceUser(realmPath: "/realms/root", username: "demo")])

        let kid = UUID().uuidString
        let seeded = try await send(
            "POST", adminURL("devices"), headers: admin,
            json: [
                "user": "demo", "deviceId": "kiosk-7", "deviceName": "Kiosk 7",
                "key": ["kty": "EC", "crv": "P-256", "x": "x", "y": "y", "kid": kid],
                "createdDate": 1_600_000_000_000,
            ])
        XCTAssertEqual(seeded.status, 201)
        let duplicate = try await send(
            "POST", adminURL("devices"), headers: admin,
            json: ["user": "demo", "deviceId": "kiosk-7", "key": ["kid": kid]])
        XCTAssertEqual(duplicate.status, 409)

        let listed = try await send("GET", adminURL("devices"), headers: admin).object()
        let record = try XCTUnwrap((listed["result"] as? [[String: Any]])?.first)
        XCTAssertEqual(record["user"] as? String, "demo")
        XCTAssertEqual(record["realm"] as? String, "/realms/root")
        XCTAssertEqual(record["lastAccessDate"] as? Int, 1_600_000_000_000)

        let deleted = try await send("DELETE", adminURL("devices/\(kid)"), headers: admin)
        XCTAssertEqual(deleted.status, 200)
        let again = try await send("DELETE", adminURL("devices/\(kid)"), headers: admin)
        XCTAssertEqual(again.status, 404)
        let remaining = try await server.devices()
        XCTAssertTrue(remaining.isEmpty)
    }

    func testSwiftAdminMethods() async throws {
        let device = try await seedDevice(user: "carol")
        let all = try await server.devices()
        XCTAssertEqual(all.map(\.uuid), [device.uuid])
        let deleted = try await server.deleteDevice(uuid: device.uuid)
        XCTAssertEqual(deleted?.uuid, device.uuid)
        let none = try await server.deleteDevice(uuid: device.uuid)
        XCTAssertNil(none)
        do {
            try await server.addDevice(
                BoundDevice(
                    uuid: "a", realmPath: "/realms/root", user: "u", deviceId: "d", deviceName: "n",
                    createdDate: 0, lastAccessDate: 0, key: ["kid": "b"]))
            XCTFail("a record whose key.kid differs from uuid must be refused")
        } catch {}
    }
}
