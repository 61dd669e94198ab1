import Foundation
import XCTest

/// Shell completion from the store: the generated bash script, run as bash runs it, and the entry point it calls
/// (`keymgr ---completion <command path> -- <option> <word index> <cursor> <words>`).
final class CompletionTests: XCTestCase {
    private var sandbox: Sandbox!
    private var kid = ""

    override func setUpWithError() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        kid = try XCTUnwrap(try sandbox.bind("alice", ["--username", "Alice Liddell"])["kid"] as? String)
        try sandbox.bind("albert", ["--username", "al"])
        try sandbox.bind("bob")
    }

    override func tearDown() { sandbox = nil }

    /// What bash offers after `keymgr <words>` (the last word is the one being completed), from the script
    /// `keymgr --generate-completion-script bash` writes.
    private func bashCompletes(_ words: [String]) throws -> [String] {
        let script = sandbox.root.appendingPathComponent("complete.bash")
        try """
            source <("$KEYMGR" --generate-completion-script bash)
            COMP_WORDS=("$KEYMGR" "$@"); COMP_CWORD=$#; COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
            _keymgr keymgr "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """.write(to: script, atomically: true, encoding: .utf8)
        let outcome = try sandbox.run(URL(fileURLWithPath: "/bin/bash"), [script.path] + words,
                                      extraEnvironment: ["KEYMGR": Sandbox.binary.path])
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        XCTAssertEqual(outcome.stderr, "", outcome.summary)
        return outcome.stdout.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }

    func testUserKidAndEventCompletionsComeFromTheStore() throws {
        let home = ["--home", sandbox.home.path]
        XCTAssertEqual(Set(try bashCompletes(home + ["list", "--user", ""])), ["alice", "albert", "bob", "al"],
                       "user ids and usernames; a username with a blank is left out")
        XCTAssertEqual(Set(try bashCompletes(["sign", "--home", sandbox.home.path, "--user", "ali"])), ["alice"])
        XCTAssertEqual(try bashCompletes(home + ["sign", "--kid", String(kid.prefix(3))]), [kid])
        try sandbox.succeed(["revoke", "--user", "bob", "--yes"])
        XCTAssertEqual(try bashCompletes(home + ["revoke", "--kid", ""]).count, 2, "only usable keys' kids")

        let events = try bashCompletes(home + ["audit", "--event", ""])
        XCTAssertTrue(events.contains("key.bound") && events.contains("pin.failed"), "\(events)")
        XCTAssertFalse(events.contains("list") || events.contains("verify"), "no subcommands after --event: \(events)")
        XCTAssertEqual(try bashCompletes(home + ["audit", "list", "--event", "key.rev"]), ["key.revoked", "key.revokedByServer"])
        XCTAssertTrue(try bashCompletes(home + ["audit", ""]).contains("verify"), "subcommands where they belong")

        // $KEYMGR_HOME names the store when --home does not.
        let viaEnvironment = try sandbox.run(Sandbox.binary, ["---completion", "list", "--", "--user", "3", "2", "keymgr", "list", "--user", "bo"],
                                             extraEnvironment: ["KEYMGR_HOME": sandbox.home.path])
        XCTAssertEqual(viaEnvironment.status, 0, viaEnvironment.summary)
        XCTAssertEqual(viaEnvironment.stdout.split(separator: "\n"), ["bob"])
    }

    func testCompletionWritesNothingAndSaysNothingWithoutAStore() throws {
        let files = { try FileManager.default.contentsOfDirectory(atPath: self.sandbox.home.path).sorted() }
        let database = { try Data(contentsOf: self.sandbox.database) }
        let before = (try files(), try database())
        _ = try bashCompletes(["--home", sandbox.home.path, "list", "--user", ""])
        XCTAssertEqual(try files(), before.0, "no file made in the store's home")
        XCTAssertEqual(try database(), before.1, "the database is untouched")

        let nowhere = sandbox.root.appendingPathComponent("no-store")
        XCTAssertEqual(try bashCompletes(["--home", nowhere.path, "list", "--user", ""]), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: nowhere.path), "completion made a home")
    }
}
