// A reflector's cache must end equal to the server's state while watches are dropped every few operations,
// versions are forced to expire (410 as HTTP status and as ERROR event), and requests fail with 500 and 429.
// Nothing lost, nothing duplicated.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <map>
#include <random>

#include "k8s/api_client.h"
#include "k8s/reflector.h"
#include "sim/apiserver/api_server.h"
#include "tests/support/run_coro.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using testing::Pause;
using testing::RunCoro;

class ReflectorFaults : public ::testing::TestWithParam<sim::ExpiredWatchMode> {};

TEST_P(ReflectorFaults, CacheConvergesToServerState) {
  asio::io_context ioc;
  sim::ApiServerOptions so;
  so.expired_watch_mode = GetParam();
  sim::ApiServer server(ioc, so);
  const auto port = server.Start().value();
  k8s::RestConfig cfg = k8s::LoopbackHttp(port);
  k8s::ClientOptions co;
  co.qps = 0;
  co.backoff_initial = 2ms;
  co.backoff_max = 20ms;
  co.max_attempts = 8;
  auto writer = k8s::ApiClient::Create(ioc.get_executor(), cfg, co).value();
  auto reader = k8s::ApiClient::Create(ioc.get_executor(), cfg, co).value();

  k8s::Reflector::Options ro;
  ro.path = "/api/v1/pods";
  ro.page_size = 7;
  ro.backoff_initial = 2ms;
  ro.backoff_max = 50ms;
  std::map<std::string, std::string> mirror;  // key -> resourceVersion, maintained only from handler calls
  int duplicate_adds = 0, unknown_deletes = 0;
  k8s::Reflector::Handlers h;
  h.on_add = [&](const json::value& o) {
    if (!mirror.emplace(k8s::ObjectKeyOf(o), k8s::ResourceVersionOf(o)).second) ++duplicate_adds;
  };
  h.on_update = [&](const json::value&, const json::value& o) {
    mirror[k8s::ObjectKeyOf(o)] = k8s::ResourceVersionOf(o);
  };
  h.on_delete = [&](const json::value& o) {
    if (mirror.erase(k8s::ObjectKeyOf(o)) == 0) ++unknown_deletes;
  };
  k8s::Reflector reflector(*reader, ro, h);
  asio::cancellation_signal stop;
  asio::co_spawn(ioc, reflector.Run(), asio::bind_cancellation_slot(stop.slot(), asio::detached));

  std::mt19937 rng(42);
  std::map<std::string, bool> live;
  RunCoro(
      ioc,
      [&]() -> asio::awaitable<void> {
        const std::string pods = "/api/v1/namespaces/default/pods";
        for (int step = 0; step < 300; ++step) {
          const int pick = static_cast<int>(rng() % 10);
          const std::string name = fmt::format("p{}", rng() % 60);
          const std::string one = pods + "/" + name;
          if (pick < 5) {
            const json::value pod = json::parse(fmt::format(
                R"({{"metadata":{{"name":"{}"}},"spec":{{"containers":[{{"name":"c","image":"x"}}]}}}})",
                name));
            auto r = co_await writer->Create(pods, pod);
            if (r) live[name] = true;
          } else if (pick < 8) {
            const json::value patch =
                json::parse(fmt::format(R"({{"metadata":{{"annotations":{{"step":"{}"}}}}}})", step));
            (void)co_await writer->MergePatch(one, patch);
          } else {
            if (co_await writer->Delete(one)) live.erase(name);
          }
          // Faults, every few operations.
          if (step % 7 == 3) server.DropWatches();
          if (step % 23 == 11) server.ExpireNextWatches(1);
          if (step % 41 == 17) server.CompactHistory();
          if (step % 31 == 5) server.FailNext(sim::FaultRule{2, 500, "GET", "/api/v1/pods", 0});
          if (step % 37 == 9) server.FailNext(sim::FaultRule{1, 429, "GET", "/api/v1/pods", 0});
          if (step % 5 == 0) co_await Pause(2ms);
        }
        // Converge: the reflector's view equals a fresh list from the server.
        const std::string all = "/api/v1/pods";
        std::map<std::string, std::string> truth;
        for (int i = 0; i < 200; ++i) {
          const k8s::ListOptions lo;
          auto list = co_await writer->List(all, lo);
          truth.clear();
          if (list) {
            for (const auto& item : list->list.at("items").as_array()) {
              truth[k8s::ObjectKeyOf(item)] = k8s::ResourceVersionOf(item);
            }
          }
          if (mirror == truth) break;
          co_await Pause(25ms);
        }
        EXPECT_EQ(mirror, truth);
      }(),
      60s);
  stop.emit(asio::cancellation_type::terminal);
  server.Stop();
  EXPECT_EQ(duplicate_adds, 0);
  EXPECT_EQ(unknown_deletes, 0);
  EXPECT_EQ(reflector.items().size(), mirror.size());
  EXPECT_GT(reflector.stats().expired, 0u);  // the faults really happened
  EXPECT_GT(reflector.stats().watches, 5u);
}

INSTANTIATE_TEST_SUITE_P(ExpiryModes, ReflectorFaults,
                         ::testing::Values(sim::ExpiredWatchMode::kHttpStatus,
                                           sim::ExpiredWatchMode::kErrorEvent),
                         [](const auto& p) {
                           return p.param == sim::ExpiredWatchMode::kHttpStatus
                                      ? std::string("Http410")
                                      : std::string("ErrorEvent410");
                         });

}  // namespace
}  // namespace hami
