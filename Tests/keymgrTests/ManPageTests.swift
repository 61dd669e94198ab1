import Foundation
import XCTest

/// keymgr(1): written by scripts/manpage.py from the binary's own help, rendered by man(1), naming every command.
/// (`make install` installing it is InstallTests'.)
final class ManPageTests: XCTestCase {
    func testTheManPageRendersAndNamesEveryCommand() throws {
        let sandbox = try Sandbox()
        let page = sandbox.root.appendingPathComponent("keymgr.1")
        let written = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                                      ["python3", packageRoot.appendingPathComponent("scripts/manpage.py").path,
                                       Sandbox.binary.path])
        XCTAssertEqual(written.status, 0, written.summary)
        try written.stdout.write(to: page, atomically: true, encoding: .utf8)
        XCTAssertTrue(written.stdout.hasPrefix(".TH KEYMGR 1 "), String(written.stdout.prefix(200)))

        let rendered = try sandbox.run(URL(fileURLWithPath: "/usr/bin/man"), ["-l", page.path],
                                       extraEnvironment: ["MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "PAGER": "cat"])
        XCTAssertEqual(rendered.status, 0, rendered.summary)
        XCTAssertEqual(rendered.stderr, "", "groff warned: \(rendered.stderr)")
        let text = rendered.stdout.replacingOccurrences(of: "\u{8}.", with: "", options: .regularExpression)
        XCTAssertTrue(text.contains("NAME") && text.contains("SYNOPSIS") && text.contains("GLOBAL OPTIONS"), String(text.prefix(500)))
        XCTAssertTrue(text.contains(try sandbox.run(Sandbox.binary, ["--version"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                      "the page names the version it documents")

        // Every command and subcommand the binary knows has its own section, with its options.
        let dump = try sandbox.run(Sandbox.binary, ["--experimental-dump-help"])
        let root = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])?["command"] as? [String: Any])
        var paths: [[String]] = []
        func walk(_ command: [String: Any], _ path: [String]) {
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                guard let name = sub["commandName"] as? String, name != "help" else { continue }
                paths.append(path + [name])
                walk(sub, path + [name])
            }
        }
        walk(root, [])
        XCTAssertGreaterThan(paths.count, 30, "\(paths)")
        let headings = Set(text.split(separator: "\n").filter { $0.hasPrefix("   keymgr ") }
            .map { $0.trimmingCharacters(in: .whitespaces) })
        for path in paths {
            XCTAssertTrue(headings.contains("keymgr " + path.joined(separator: " ")), "no section for keymgr \(path.joined(separator: " "))")
        }
        for option in ["--newest", "--reverse", "--pin-stdin", "--dry-run", "--wide"] {
            XCTAssertTrue(text.contains(option), "the page does not document \(option)")
        }
    }

    /// FILES names the installed paths for the PREFIX given (the Debian package's: /usr), never a literal PREFIX,
    /// with the policy, the store and the credentials, and SEE ALSO points at keymgr-policy(5) (issue 32).
    func testFilesNameTheRealPathsAndSeeAlsoThePolicyPage() throws {
        let sandbox = try Sandbox()
        let written = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                                      ["python3", packageRoot.appendingPathComponent("scripts/manpage.py").path,
                                       "--prefix", "/usr", Sandbox.binary.path])
        XCTAssertEqual(written.status, 0, written.summary)
        let page = sandbox.root.appendingPathComponent("keymgr.1")
        try written.stdout.write(to: page, atomically: true, encoding: .utf8)
        let rendered = try sandbox.run(URL(fileURLWithPath: "/usr/bin/man"), ["-l", page.path],
                                       extraEnvironment: ["MANWIDTH": "200", "MAN_KEEP_FORMATTING": "0", "PAGER": "cat"])
        XCTAssertEqual(rendered.stderr, "", "groff warned: \(rendered.stderr)")
        let text = Self.plain(rendered.stdout)
        let files = try XCTUnwrap(text.range(of: "\nFILES\n")).upperBound
        let tail = String(text[files...])
        XCTAssertFalse(text.contains("PREFIX"), tail)
        for path in ["/usr/libexec/keymgr/keymgr-core", "/etc/keymgr/policy.toml", "/var/lib/keymgr/",
                     "/etc/credstore.encrypted/keymgr.master", "/run/keymgr/keymgr.sock", "/usr/lib/systemd/system/keymgr.socket"] {
            XCTAssertTrue(tail.contains(path), "FILES does not name \(path): \(tail)")
        }
        XCTAssertTrue(tail.contains("SEE ALSO") && tail.contains("keymgr-policy(5)") && tail.contains("/usr/share/doc/keymgr/"), tail)
    }

    /// keymgr-policy(5) renders without a groff warning and documents the check and every rule key.
    func testThePolicyPageRenders() throws {
        let sandbox = try Sandbox()
        let rendered = try sandbox.run(URL(fileURLWithPath: "/usr/bin/man"),
                                       ["-l", packageRoot.appendingPathComponent("contrib/man/keymgr-policy.5").path],
                                       extraEnvironment: ["MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "PAGER": "cat"])
        XCTAssertEqual(rendered.status, 0, rendered.summary)
        XCTAssertEqual(rendered.stderr, "", "groff warned: \(rendered.stderr)")
        let text = Self.plain(rendered.stdout)
        for word in ["keymgr-policy", "/etc/keymgr/policy.toml", "--check-policy", "who", "may", "for", "authTypes", "[self]",
                     "SEE ALSO"] {
            XCTAssertTrue(text.contains(word), "keymgr-policy(5) does not mention \(word)")
        }
    }

    /// man's output without its overstrikes (bold `c\bc`, underline `_\bc`) and with groff's Unicode hyphen and
    /// minus as `-`.
    static func plain(_ text: String) -> String {
        text.replacingOccurrences(of: "_\u{8}", with: "").replacingOccurrences(of: "\u{8}.", with: "", options: .regularExpression)
            .replacingOccurrences(of: "\u{2010}", with: "-").replacingOccurrences(of: "\u{2212}", with: "-")
    }
}
