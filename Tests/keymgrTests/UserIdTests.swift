import Foundation
import XCTest

/// User ids are opaque server identifiers: whatever their characters, they come back exactly as given.
final class UserIdTests: XCTestCase {

    static let awkwardIds = [
        "ada lovelace",
        #"o'brien "the" quoted"#,
        "ou=people/uid=ada\\x/../..",
        "Zoë Ødegård 東京 🔑",
        "id=demo,ou=user,o=alpha,ou=services,ou=am-config",
    ]

    func testAwkwardUserIdsRoundTrip() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for userId in Self.awkwardIds {
            let key = try sandbox.bind(userId, ["--username", userId, "--challenge", "c"])
            XCTAssertEqual(key["userId"] as? String, userId)
            XCTAssertEqual(key["username"] as? String, userId)
            XCTAssertEqual(try jwsParts(key["jws"] as? String ?? "").payload["sub"] as? String, userId)

            let listed = try sandbox.succeed(["list", "--user", userId, "--json"]).array()
            XCTAssertEqual(listed.map { $0["userId"] as? String }, [userId])
            XCTAssertEqual(listed.first?["kid"] as? String, key["kid"] as? String)

            let signed = try sandbox.succeed(["sign", "--user", userId, "--challenge", "c2"])
            XCTAssertEqual(try jwsParts(signed.stdout).payload["sub"] as? String, userId)

            let audit = try sandbox.succeed(["audit", "--user", userId, "--json"]).array()
            XCTAssertFalse(audit.isEmpty)
            XCTAssertTrue(audit.allSatisfy { $0["userId"] as? String == userId })
        }
        let users = try sandbox.succeed(["users", "--json"]).array().compactMap { $0["userId"] as? String }
        XCTAssertEqual(Set(users), Set(Self.awkwardIds))

        let table = try sandbox.succeed(["users"]).stdout
        XCTAssertTrue(table.contains("Zoë Ødegård 東京 🔑"), table)
        XCTAssertTrue(table.contains(#"o'brien "the" quoted"#), table)
        XCTAssertEqual(table.split(separator: "\n").count, Self.awkwardIds.count + 1)

        let csv = try sandbox.succeed(["audit", "--format", "csv", "--user", #"o'brien "the" quoted"#]).stdout
        XCTAssertTrue(csv.contains(#""o'brien ""the"" quoted""#), "CSV quotes double the quote: \(csv)")

        for userId in Self.awkwardIds {
            let revoked = try sandbox.succeed(["revoke", "--user", userId, "--json"]).array()
            XCTAssertEqual(revoked.map { $0["userId"] as? String }, [userId])
        }
    }
}
