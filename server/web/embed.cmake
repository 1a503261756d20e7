# Turns server/web/{dashboard.html,dashboard.js} into a C++ source defining
# kDashboardHtml and kDashboardJs (raw string literals). Run by the server build with
# -DWEB_DIR=... -DOUT=...
file(READ ${WEB_DIR}/dashboard.html HTML)
file(READ ${WEB_DIR}/dashboard.js JS)
file(WRITE ${OUT} "// Generated from server/web/ by server/web/embed.cmake. Do not edit.\n"
  "#include \"server/http_server.h\"\n"
  "namespace kvstash::server {\n"
  "const char kDashboardHtml[] = R\"kvstash_web(${HTML})kvstash_web\";\n"
  "const char kDashboardJs[] = R\"kvstash_web(${JS})kvstash_web\";\n"
  "}  // namespace kvstash::server\n")
