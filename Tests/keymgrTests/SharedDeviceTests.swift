import Foundation
import XCTest

/// The README's "Deploying on a shared device", as the tests read it: its fenced blocks are the commands that
/// `SystemdDeploymentTests` runs inside a booted container, so the section cannot say one thing while the test
/// checks another.
struct DeploymentSection {
    /// The section, from its heading to the next one.
    let text: String
    /// The first `sh` block: what root runs once, in order.
    let setup: [String]
    /// The second `sh` block: what a person types.
    let people: [String]
    /// The `cron` block's one line.
    let cronLine: String

    init() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let start = try XCTUnwrap(readme.range(of: "\n## Deploying on a shared device\n"), "README has no such section")
        let rest = readme[start.upperBound...]
        text = String(rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)])
        let shell = Self.blocks(in: text, language: "sh")
        XCTAssertEqual(shell.count, 2, "the section has two sh blocks: root's setup and a person's commands")
        setup = shell.first ?? []
        people = shell.dropFirst().first ?? []
        let cron = Self.blocks(in: text, language: "cron")
        XCTAssertEqual(cron.count, 1, "the section has one cron block")
        XCTAssertEqual(cron.first?.count, 1, "the cron block is one line")
        cronLine = cron.first?.first ?? ""
    }

    /// The non-empty lines of every block fenced as ```language.
    static func blocks(in text: String, language: String) -> [[String]] {
        var blocks: [[String]] = []
        var current: [String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```" + language {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current ?? [])
                current = nil
            } else if current != nil, !line.trimmingCharacters(in: .whitespaces).isEmpty {
                current?.append(String(line))
            }
        }
        return blocks
    }

    /// The cron line's schedule (five fields), user and command, as /etc/cron.d reads it.
    var cron: (schedule: [String], user: String, command: String) {
        let fields = cronLine.split(separator: " ", maxSplits: 6, omittingEmptySubsequences: true).map(String.init)
        guard fields.count == 7 else { return ([], "", "") }
        return (Array(fields[0..<5]), fields[5], fields[6])
    }
}

/// The section against the files it describes, without a container: what the section tells root and people to
/// type agrees with the units, the sysusers.d and tmpfiles.d files and the Makefile's defaults. The commands
/// themselves run in `SystemdDeploymentTests`.
final class SharedDeviceTests: XCTestCase {
    private func contrib(_ path: String) throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent("contrib/" + path), encoding: .utf8)
    }

    /// `Key=value` lines of a unit or configuration file, comments left out.
    private func settings(_ text: String, _ key: String) -> [String] {
        text.split(separator: "\n").compactMap { line in
            line.hasPrefix(key + "=") ? String(line.dropFirst(key.count + 1)) : nil
        }
    }

    func testPeopleTypeKeymgrWithNoPrefixAndRootNeedsNoSudoersRule() throws {
        let section = try DeploymentSection()
        XCTAssertFalse(section.people.isEmpty)
        for line in section.people {
            XCTAssertTrue(line.hasPrefix("keymgr "), "a person types keymgr itself: \(line)")
        }
        XCTAssertTrue(section.people.contains { $0.hasPrefix("keymgr sign ") }, "\(section.people)")
        XCTAssertFalse(section.text.contains("sudoers"), "no sudoers rule")
        XCTAssertFalse(section.text.contains("sudo "), "nobody needs sudo")
        for line in section.setup + section.people where line.contains("systemd-run") {
            XCTAssertTrue(line.contains(" keymgr init --home "), "systemd-run only to make the store: \(line)")
        }
        XCTAssertFalse(section.text.contains("KEYMGR_MASTER_KEY_FILE"), "the master key stays an encrypted credential")
    }

    func testTheSetupNamesWhatTheShippedFilesUse() throws {
        let section = try DeploymentSection()
        let setup = section.setup.joined(separator: "\n")
        let service = try contrib("systemd/keymgr.service")
        let socket = try contrib("systemd/keymgr.socket")
        let sync = try contrib("systemd/keymgr-sync.service")

        // The credentials the section makes are the ones the agent's unit loads, under the names it loads them.
        XCTAssertEqual(settings(service, "LoadCredentialEncrypted"), ["keymgr.master", "keymgr.admin"])
        for name in ["keymgr.master", "keymgr.admin"] {
            XCTAssertTrue(setup.contains("systemd-creds encrypt --name=\(name) ") && setup.contains("/etc/credstore.encrypted/\(name)"),
                          "\(name) is not made as the unit loads it:\n\(setup)")
        }
        XCTAssertTrue(try contrib("tmpfiles.d/keymgr.conf").contains("\nd /etc/credstore.encrypted 0700 root root -\n"))

        // The store the section makes is the one the agent serves, made by the user it runs as.
        let agent = try XCTUnwrap(settings(service, "ExecStart").first)
        XCTAssertTrue(agent.hasSuffix("/keymgr-core agent --home /var/lib/keymgr --idle-exit 300"), agent)
        XCTAssertTrue(setup.contains("-p User=keymgr ") && setup.contains("keymgr init --home /var/lib/keymgr "), setup)
        XCTAssertEqual(settings(service, "User"), ["keymgr"])
        XCTAssertEqual(settings(service, "StateDirectory"), ["keymgr"])
        XCTAssertTrue(try contrib("sysusers.d/keymgr.conf").contains("\nu keymgr - "))
        // The package makes the accounts and directories (its postinst runs systemd-sysusers and systemd-tmpfiles).
        XCTAssertEqual(section.setup.first, "apt-get install ./keymgr_*_amd64.deb", "the setup starts with the package")
        let deb = try String(contentsOf: packageRoot.appendingPathComponent("scripts/deb.sh"), encoding: .utf8)
        XCTAssertTrue(deb.contains("systemd-sysusers ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} keymgr.conf")
                      && deb.contains("systemd-tmpfiles ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} --create keymgr.conf"), deb)
        XCTAssertTrue(section.text.replacingOccurrences(of: "\n", with: " ")
                        .contains("`systemd-sysusers keymgr.conf` and `systemd-tmpfiles --create keymgr.conf`"),
                      "after `make install` the section says to make them")
        XCTAssertTrue(setup.contains("systemctl enable --now keymgr.socket keymgr-sync.timer"), setup)

        // The socket people reach is the one the cron line and the timer's service name.
        XCTAssertEqual(settings(socket, "ListenStream"), ["/run/keymgr/keymgr.sock"])
        XCTAssertEqual(settings(socket, "SocketMode"), ["0666"], "the policy decides, not the mode")
        XCTAssertEqual(settings(sync, "Environment"), ["KEYMGR_SOCKET=/run/keymgr/keymgr.sock"])
        XCTAssertEqual(settings(sync, "ExecStart"), ["@BINDIR@/keymgr sync --json"])
        XCTAssertEqual(settings(sync, "User"), ["keymgr"])
        XCTAssertTrue(settings(sync, "LoadCredentialEncrypted").isEmpty, "the timer's service holds no credential")
    }

    func testTheCronLineRunsTheSyncAsKeymgrThroughTheAgent() throws {
        let cron = try DeploymentSection().cron
        XCTAssertEqual(cron.schedule, ["*/15", "*", "*", "*", "*"])
        XCTAssertEqual(cron.user, "keymgr", "an /etc/cron.d line names the user it runs as")
        // The program is named by the path the package gives it (scripts/deb.sh: `make install PREFIX=/usr`).
        let makefile = try String(contentsOf: packageRoot.appendingPathComponent("Makefile"), encoding: .utf8)
        let deb = try String(contentsOf: packageRoot.appendingPathComponent("scripts/deb.sh"), encoding: .utf8)
        XCTAssertTrue(deb.contains("make --no-print-directory install PREFIX=/usr ") && makefile.contains("\nBINDIR := $(PREFIX)/bin\n"))
        XCTAssertTrue(cron.command.hasPrefix("KEYMGR_SOCKET=/run/keymgr/keymgr.sock /usr/bin/keymgr sync --json "),
                      cron.command)
        XCTAssertFalse(cron.command.contains("/var/log"), "the keymgr user cannot write /var/log")
        XCTAssertFalse(cron.command.contains("KEYMGR_HOME"), "through the agent, never a store of its own")
    }
}
