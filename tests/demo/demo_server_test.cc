// demo/demo_server.h with real kvstash-server processes: a second server on a held port
// or data folder fails with the holder's pid, and a server started for a demo ends with
// the demo when the demo is interrupted (SIGINT) or killed (SIGKILL).
#include "demo/demo_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace kvstash::demo {
namespace {

class DemoServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("kvstash-demo-server-" + std::to_string(getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  DemoServerOptions Options(const std::string& dir) const {
    DemoServerOptions o;
    o.binary = KVSTASH_SERVER_BIN;
    o.data_dir = (root_ / dir).string();
    o.port = 0;
    o.http_port = 0;
    o.tenant = "demo";
    o.credential = "0123456789abcdef";
    o.log_file = o.data_dir + ".log";
    return o;
  }

  // True once `pid` is gone or a zombie (its parent died; init reaps it), within 20 s.
  static bool Ends(pid_t pid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string pid_field, comm, state;
      if (!(stat >> pid_field >> comm >> state) || state == "Z") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Forks a "demo" that starts a server and waits; returns the demo's pid and sets
  // *server to the server's pid.
  pid_t ForkDemo(pid_t* server) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t demo = fork();
    if (demo == 0) {
      close(fds[0]);
      // As in a terminal's foreground (a background job of a non-interactive shell, as
      // ctest may be, starts with SIGINT ignored, and an ignored signal stays ignored).
      signal(SIGINT, SIG_DFL);
      DemoServer s;
      pid_t pid = s.Start(Options("child")).ok() ? s.pid() : -1;
      (void)!write(fds[1], &pid, sizeof pid);
      for (;;) pause();
    }
    close(fds[1]);
    *server = -1;
    EXPECT_EQ(read(fds[0], server, sizeof *server), static_cast<ssize_t>(sizeof *server));
    close(fds[0]);
    return demo;
  }

  std::filesystem::path root_;
};

// A started server that dies on its own is named, with how it ended and its log, for
// the demo's error messages; the note is empty while it runs and after Stop().
TEST_F(DemoServerTest, AServerThatDiedIsNamedWithItsStatusAndLog) {
  DemoServer s;
  const DemoServerOptions o = Options("dies");
  ASSERT_TRUE(s.Start(o).ok());
  EXPECT_EQ(StartedServerExitNote(), "");
  const pid_t pid = s.pid();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(Ends(pid));
  EXPECT_EQ(StartedServerExitNote(), "the kvstash-server it started (pid " + std::to_string(pid) +
                                         ") was killed by signal 9; its log: " + o.log_file);
  EXPECT_EQ(s.Stop(), 128 + SIGKILL);
  EXPECT_EQ(StartedServerExitNote(), "");
}

// The tenant's credential is in a mode-0600 config file, not on the server's command line
// (which every local user can read), and a client with it is let in.
TEST_F(DemoServerTest, TheCredentialIsNotOnTheCommandLine) {
  DemoServer s;
  const DemoServerOptions o = Options("private");
  ASSERT_TRUE(s.Start(o).ok());
  std::ifstream cmdline_file("/proc/" + std::to_string(s.pid()) + "/cmdline");
  const std::string cmdline{std::istreambuf_iterator<char>(cmdline_file), std::istreambuf_iterator<char>()};
  EXPECT_NE(cmdline.find("--config"), std::string::npos);
  EXPECT_EQ(cmdline.find(o.credential), std::string::npos) << cmdline;
  const auto perms = std::filesystem::status(o.data_dir + "/.demo-server.json").permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ClientOptions co;
  co.servers = {"127.0.0.1:" + std::to_string(s.port())};
  co.tenant = o.tenant;
  co.credential = o.credential;
  auto client = Client::Create(co);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Ping(0).ok());
  EXPECT_EQ(s.Stop(), 0);
}

TEST_F(DemoServerTest, AHeldPortOrDataFolderNamesItsHolder) {
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction before[3];
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(sigaction(kSignals[i], nullptr, &before[i]), 0);
  DemoServer first;
  ASSERT_TRUE(first.Start(Options("first")).ok());
  const std::string holder = "pid " + std::to_string(first.pid()) + " (";

  DemoServer same_port;
  DemoServerOptions o = Options("second");
  o.port = first.port();
  Status s = same_port.Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("port " + std::to_string(first.port()) + " is held by " + holder), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("kill " + std::to_string(first.pid())), std::string::npos) << s.message();

  DemoServer same_folder;
  s = same_folder.Start(Options("first"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is in use by " + holder), std::string::npos) << s.message();
  EXPECT_EQ(first.Stop(), 0);
  // Every failed start and the stop handed the signals back: the actions of before
  // (a handler saved as its own "previous" once made SIGTERM loop forever).
  for (size_t i = 0; i < 3; ++i) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(kSignals[i], nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, before[i].sa_handler) << "signal " << kSignals[i];
  }
}

TEST_F(DemoServerTest, AnInterruptedDemoStopsItsServerBeforeItExits) {
  pid_t server = -1;
  const pid_t demo = ForkDemo(&server);
  ASSERT_GT(server, 0);
  kill(demo, SIGINT);
  int st = 0;
  ASSERT_EQ(waitpid(demo, &st, 0), demo);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT);  // the demo still dies of the signal
  EXPECT_NE(kill(server, 0), 0);                            // and its server is already gone
}

TEST_F(DemoServerTest, AKilledDemoTakesItsServerWithIt) {
  pid_t server = -1;
  const pid_t demo = ForkDemo(&server);
  ASSERT_GT(server, 0);
  kill(demo, SIGKILL);  // no handler runs: the kernel's parent-death signal does it
  ASSERT_EQ(waitpid(demo, nullptr, 0), demo);
  EXPECT_TRUE(Ends(server));
}

TEST_F(DemoServerTest, AKeptServerOutlivesTheDemo) {
  pid_t server = -1;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t demo = fork();
  if (demo == 0) {
    DemoServer s;
    DemoServerOptions o = Options("kept");
    o.exit_with_parent = false;  // --keep-server
    pid_t pid = s.Start(o).ok() ? s.pid() : -1;
    s.Detach();
    (void)!write(fds[1], &pid, sizeof pid);
    _exit(0);
  }
  close(fds[1]);
  ASSERT_EQ(read(fds[0], &server, sizeof server), static_cast<ssize_t>(sizeof server));
  close(fds[0]);
  ASSERT_EQ(waitpid(demo, nullptr, 0), demo);
  ASSERT_GT(server, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(kill(server, 0), 0);  // still running
  kill(server, SIGTERM);
  EXPECT_TRUE(Ends(server));
}

}  // namespace
}  // namespace kvstash::demo
