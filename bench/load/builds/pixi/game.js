// Gem Drift: the Kiln load benchmark's PixiJS page. A spritesheet, a background texture and a
// level file load first; then the gems drift and spin, rendered by Pixi's ticker every frame.
(async function () {
  'use strict';
  try {
    // Textures load on the page, not in Pixi's image worker, so every request is the page's.
    PIXI.Assets.setPreferences({ preferWorkers: false });
    const app = new PIXI.Application();
    await app.init({ resizeTo: window, background: '#1b1330', preference: 'webgl', antialias: false });
    document.body.appendChild(app.canvas);

    const [background, sheet, level] = await Promise.all([
      PIXI.Assets.load('assets/background.png'),
      PIXI.Assets.load('assets/atlas.json'),
      fetch('assets/level.json').then((r) => {
        if (!r.ok) throw new Error(`assets/level.json: HTTP ${r.status}`);
        return r.json();
      }),
    ]);

    const W = app.screen.width;
    const H = app.screen.height;
    const bg = new PIXI.Sprite(background);
    bg.width = W;
    bg.height = H;
    app.stage.addChild(bg);
    const gems = level.sprites.map((s) => {
      const sprite = new PIXI.Sprite(sheet.textures[s.frame]);
      sprite.anchor.set(0.5);
      sprite.scale.set(0.6);
      sprite.position.set((s.x * W) / level.width, (s.y * H) / level.height);
      app.stage.addChild(sprite);
      return { sprite, vx: s.vx, vy: s.vy, spin: s.spin };
    });
    const label = new PIXI.Text({ text: 'Gem Drift', style: { fontFamily: 'sans-serif', fontSize: 20, fill: 0xffffff } });
    label.position.set(12, 12);
    app.stage.addChild(label);

    let n = 0;
    app.ticker.add((ticker) => {
      const dt = Math.min(ticker.deltaMS, 100) / 1000;
      for (const g of gems) {
        g.sprite.x += g.vx * dt;
        g.sprite.y += g.vy * dt;
        if (g.sprite.x < 0 || g.sprite.x > W) g.vx = -g.vx;
        if (g.sprite.y < 0 || g.sprite.y > H) g.vy = -g.vy;
        g.sprite.rotation += g.spin * dt;
      }
      if (++n % 30 === 0) label.text = `Gem Drift  ${Math.round(ticker.FPS)} fps`;
    });
    document.body.dataset.state = 'ready'; // every asset is in: the benchmark's "ready"
  } catch (e) {
    document.body.dataset.state = 'error';
    document.body.dataset.error = String((e && e.message) || e);
    throw e;
  }
})();
