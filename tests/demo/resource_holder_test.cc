// demo/resource_holder.h against resources this test process holds itself: a listening
// socket (IPv4 and IPv6) and a POSIX lock, and the same resources once released.
#include "demo/resource_holder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace kvstash::demo {
namespace {

// A socket listening on a free port of `family` (AF_INET or AF_INET6 loopback); -1 when the
// family is not available here.
int ListenOnFreePort(int family, uint16_t* port) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                  : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

void ExpectThisProcess(const std::optional<ResourceHolder>& h) {
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->pid, getpid());
  EXPECT_NE(h->command.find("resource_holder_tests"), std::string::npos) << h->command;
  EXPECT_EQ(DescribeHolder(*h), "pid " + std::to_string(getpid()) + " (" + h->command + ")");
}

TEST(ResourceHolderTest, ListeningPortIsHeldByThisProcessUntilClosed) {
  for (int family : {AF_INET, AF_INET6}) {
    uint16_t port = 0;
    const int fd = ListenOnFreePort(family, &port);
    if (fd < 0) {
      if (family == AF_INET6) continue;  // no IPv6 loopback in this sandbox
      FAIL() << "cannot listen on 127.0.0.1";
    }
    SCOPED_TRACE(family == AF_INET ? "IPv4" : "IPv6");
    ExpectThisProcess(ListeningPortHolder(port));
    close(fd);
    EXPECT_FALSE(ListeningPortHolder(port).has_value());
  }
}

TEST(ResourceHolderTest, LockedFileIsHeldByThisProcessUntilUnlocked) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvstash-lock-" + std::to_string(getpid()))).string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(FileLockHolder(path).has_value());
  struct flock lk {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  ASSERT_EQ(fcntl(fd, F_SETLK, &lk), 0);  // as RocksDB locks its LOCK file
  ExpectThisProcess(FileLockHolder(path));
  lk.l_type = F_UNLCK;
  ASSERT_EQ(fcntl(fd, F_SETLK, &lk), 0);
  EXPECT_FALSE(FileLockHolder(path).has_value());
  close(fd);
  std::remove(path.c_str());
  EXPECT_FALSE(FileLockHolder(path).has_value());  // no such file
}

TEST(ResourceHolderTest, AnUnknownOwnerIsDescribedAsAnotherUsers) {
  EXPECT_EQ(DescribeHolder(ResourceHolder{}), "a process of another user");
}

}  // namespace
}  // namespace kvstash::demo
