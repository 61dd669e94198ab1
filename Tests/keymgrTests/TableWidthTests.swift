import Foundation
import XCTest

/// The width rule of tables: the terminal's width (or `COLUMNS`, or 80 on a pipe), room given up by the least
/// useful columns first, never an auth type or a state; `audit` details readable.
final class TableWidthTests: XCTestCase {
    private var sandbox: Sandbox!
    private let longId = "uid=bob.marley-long-directory-name,ou=people,dc=example,dc=com"

    override func setUpWithError() throws {
        sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice", ["--username", "Alice Liddell"])
        try sandbox.bind(longId, ["--username", "Robert Nesta Marley", "--auth-type", "app-pin", "--pin-stdin"],
                         stdin: "482916\n")
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c-1"])
    }

    override func tearDown() { sandbox = nil }

    private func lines(_ text: String) -> [Substring] {
        text.replacingOccurrences(of: "\r", with: "").split(separator: "\n")
    }

    /// Runs keymgr on a pseudo-terminal of `columns` columns (util-linux `script`), with no `COLUMNS` set.
    private func onTerminal(columns: Int, _ arguments: [String]) throws -> Outcome {
        let command = (["stty", "cols", String(columns), ";", Sandbox.binary.path, "--home", sandbox.home.path]
                       + arguments).map { $0 == ";" ? $0 : "'\($0)'" }.joined(separator: " ")
        return try sandbox.run(URL(fileURLWithPath: "/usr/bin/script"), ["-qec", command, "/dev/null"])
    }

    func testAPipeGets80ColumnsWithAuthTypesAndStatesWhole() throws {
        for command in [["list"], ["audit"], ["users"], ["list", "--status", "all"]] {
            let outcome = try sandbox.succeed(command)
            for line in lines(outcome.stdout) {
                XCTAssertLessThanOrEqual(line.count, 80, "`keymgr \(command.joined(separator: " "))`: \(line)")
            }
        }
        let list = try sandbox.succeed(["list"]).stdout
        XCTAssertTrue(list.contains("APPLICATION_PIN") && list.contains("unregistered") && list.contains("active"), list)
        XCTAssertFalse(list.contains("APPLICA…") || list.contains("unregis…"), list)
        XCTAssertTrue(list.contains("…"), "the long user id is cut: \(list)")
        // Narrower than the whole columns: ids give way, auth types and states do not.
        let narrow = try sandbox.keymgr(["list"], extraEnvironment: ["COLUMNS": "50"])
        XCTAssertEqual(narrow.status, 0, narrow.summary)
        XCTAssertTrue(narrow.stdout.contains("APPLICATION_PIN") && narrow.stdout.contains("unregistered"), narrow.stdout)
    }

    func testColumnsWidensTablesAndShortensTimestampsOnlyWhenShort() throws {
        let wide = try sandbox.keymgr(["list"], extraEnvironment: ["COLUMNS": "200"])
        XCTAssertEqual(wide.status, 0, wide.summary)
        XCTAssertTrue(wide.stdout.contains(longId), "200 columns hold the whole id: \(wide.stdout)")
        XCTAssertTrue(wide.stdout.contains("CREATED"), "and the creation time: \(wide.stdout)")
        XCTAssertNotNil(wide.stdout.firstMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/), "whole timestamps: \(wide.stdout)")
        for line in lines(wide.stdout) { XCTAssertLessThanOrEqual(line.count, 200, String(line)) }
        let narrow = try sandbox.succeed(["list"]).stdout
        XCTAssertNil(narrow.firstMatch(of: /\d\d:\d\d:\d\dZ/), "80 columns shorten timestamps: \(narrow)")
        XCTAssertNotNil(narrow.firstMatch(of: /\d{4}-\d\d-\d\d/), narrow)
        // --wide is what it was: whole kids, ids and timestamps, whatever the width.
        let all = try sandbox.keymgr(["list", "--wide"], extraEnvironment: ["COLUMNS": "40"])
        XCTAssertTrue(all.stdout.contains(longId) && all.stdout.contains("CREATED"), all.stdout)
        XCTAssertNotNil(all.stdout.firstMatch(of: /\d\d:\d\d:\d\dZ/), all.stdout)
    }

    func testATerminalsWidthIsUsedWhenNoColumnsIsSet() throws {
        let at160 = try onTerminal(columns: 160, ["list"])
        XCTAssertEqual(at160.status, 0, at160.summary)
        XCTAssertTrue(at160.stdout.contains(longId), "a 160-column terminal shows the whole id: \(at160.stdout)")
        for line in lines(at160.stdout) { XCTAssertLessThanOrEqual(line.count, 160, String(line)) }
        let at80 = try onTerminal(columns: 80, ["list"])
        XCTAssertEqual(at80.status, 0, at80.summary)
        XCTAssertFalse(at80.stdout.contains(longId), at80.stdout)
        for line in lines(at80.stdout) { XCTAssertLessThanOrEqual(line.count, 80, String(line)) }
        XCTAssertTrue(at80.stdout.contains("APPLICATION_PIN"), at80.stdout)
    }

    func testAuditDetailsAreNameValuePairs() throws {
        let audit = try sandbox.keymgr(["audit"], extraEnvironment: ["COLUMNS": "200"])
        XCTAssertEqual(audit.status, 0, audit.summary)
        XCTAssertTrue(audit.stdout.contains("authType=APPLICATION_PIN"), audit.stdout)
        XCTAssertFalse(audit.stdout.contains("{\""), "no JSON in the table: \(audit.stdout)")
        // --json and csv keep the details as JSON.
        let json = try sandbox.succeed(["audit", "--json"]).array()
        let bound = try XCTUnwrap(json.first { $0["event"] as? String == "key.bound" })
        XCTAssertNotNil((bound["details"] as? [String: Any])?["authType"], "\(bound)")
        XCTAssertTrue(try sandbox.succeed(["audit", "--format", "csv"]).stdout.contains("\"{\"\"authType\"\""))
    }
}
