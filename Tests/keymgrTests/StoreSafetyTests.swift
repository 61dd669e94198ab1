import Foundation
import XCTest

/// The store refuses to run where it would be unsafe or would damage data, with exit 78 and a message that says why.
final class StoreSafetyTests: XCTestCase {
    func testADatabaseFromANewerKeymgrIsRefusedNamingBothVersions() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let status = try sandbox.succeed(["status", "--json"]).object()
        let current = try XCTUnwrap(status["schemaVersion"] as? Int)
        let bumped = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                     [sandbox.database.path, "PRAGMA user_version = \(current + 7)"])
        XCTAssertEqual(bumped.status, 0, bumped.summary)
        let refused = try sandbox.keymgr(["status"])
        XCTAssertEqual(refused.status, 78, refused.summary)
        XCTAssertTrue(refused.stderr.contains("\(current + 7)") && refused.stderr.contains("\(current)"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("upgrade keymgr"), refused.stderr)
        try assertJSONError(try sandbox.keymgr(["list", "--json"]), status: 78, code: "config")
    }

    func testAHomeOtherUsersCanWriteIsRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        XCTAssertEqual(chmod(sandbox.home.path, 0o777), 0)
        let refused = try sandbox.keymgr(["status"])
        XCTAssertEqual(refused.status, 78, refused.summary)
        XCTAssertTrue(refused.stderr.contains("chmod 700"), refused.stderr)
        XCTAssertEqual(chmod(sandbox.home.path, 0o700), 0)
        XCTAssertEqual(try sandbox.keymgr(["status"]).status, 0)
    }

    func testInitCreatesAPrivateHomeDatabaseAndMasterKey() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        func mode(_ url: URL) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int ?? -1) & 0o777
        }
        XCTAssertEqual(try mode(sandbox.home), 0o700)
        XCTAssertEqual(try mode(sandbox.database), 0o600)
        XCTAssertEqual(try mode(sandbox.home.appendingPathComponent("master.key")), 0o600)
    }
}
